//! The memory pool a connection's statements share under a memory limit: DataFusion's fair
//! spill pool with a share of the limit kept back from the operators that can spill.
//!
//! Operators that can spill (sorts buffering their input, aggregates, Basalt's fused
//! group-by) split what the others leave over, less [`HEADROOM`]; operators that cannot
//! spill (the merges reading spilled runs back, hash join build sides, a sort's merge of
//! its buffered runs before it spills) may use the whole limit. With DataFusion's fair
//! pool a sort's output could fill the pool while its own merge still had to grow, and the
//! merge, which cannot spill, failed the statement; the headroom is what that merge and
//! the merges of the sorts beside it grow into.
//!
//! What this module must not do: hand out more than the limit in total.

use std::fmt;

use datafusion::common::{Result, resources_datafusion_err};
use datafusion::execution::memory_pool::{
    MemoryConsumer, MemoryLimit, MemoryPool, MemoryReservation, human_readable_size,
};
use parking_lot::Mutex;

/// The fraction of the limit (one part in this many) spilling operators leave to the
/// others.
pub const HEADROOM: usize = 4;

/// A fair spill pool with headroom for operators that cannot spill (see the module doc).
#[derive(Debug)]
pub struct HeadroomPool {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Registered consumers that can spill.
    spillers: usize,
    spillable: usize,
    unspillable: usize,
}

impl HeadroomPool {
    /// A pool of `limit` bytes.
    pub fn new(limit: usize) -> HeadroomPool {
        HeadroomPool { limit, state: Mutex::new(State::default()) }
    }

    fn refuse(&self, r: &MemoryReservation, additional: usize, available: usize) -> Result<()> {
        Err(resources_datafusion_err!(
            "Failed to allocate additional {} for {} with {} already allocated for this \
             reservation - {} remain available for the total memory pool: {}",
            human_readable_size(additional),
            r.consumer().name(),
            human_readable_size(r.size()),
            human_readable_size(available),
            self
        ))
    }
}

impl MemoryPool for HeadroomPool {
    fn name(&self) -> &str {
        "fair"
    }

    fn register(&self, consumer: &MemoryConsumer) {
        if consumer.can_spill() {
            self.state.lock().spillers += 1;
        }
    }

    fn unregister(&self, consumer: &MemoryConsumer) {
        if consumer.can_spill() {
            let mut s = self.state.lock();
            s.spillers = s.spillers.saturating_sub(1);
        }
    }

    fn grow(&self, r: &MemoryReservation, additional: usize) {
        let mut s = self.state.lock();
        if r.consumer().can_spill() {
            s.spillable += additional;
        } else {
            s.unspillable += additional;
        }
    }

    fn shrink(&self, r: &MemoryReservation, shrink: usize) {
        let mut s = self.state.lock();
        if r.consumer().can_spill() {
            s.spillable = s.spillable.saturating_sub(shrink);
        } else {
            s.unspillable = s.unspillable.saturating_sub(shrink);
        }
    }

    fn try_grow(&self, r: &MemoryReservation, additional: usize) -> Result<()> {
        let mut s = self.state.lock();
        if r.consumer().can_spill() {
            // Each spiller's share of what the others and the headroom leave.
            let spill_limit = self.limit - self.limit / HEADROOM;
            let share = spill_limit.saturating_sub(s.unspillable) / s.spillers.max(1);
            // One that holds nothing has nothing to spill and would fail its statement: it
            // may take what is free beyond its share.
            let free = self.limit.saturating_sub(s.unspillable + s.spillable);
            let fits = additional <= free && (r.size() + additional <= share || r.size() == 0);
            if !fits {
                return self.refuse(r, additional, share.saturating_sub(r.size()));
            }
            s.spillable += additional;
        } else {
            let available = self.limit.saturating_sub(s.unspillable + s.spillable);
            if additional > available {
                return self.refuse(r, additional, available);
            }
            s.unspillable += additional;
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        let s = self.state.lock();
        s.spillable + s.unspillable
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

impl fmt::Display for HeadroomPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(pool_size: {})", self.name(), human_readable_size(self.limit))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn spillers_leave_the_headroom_to_the_others() {
        let pool: Arc<dyn MemoryPool> = Arc::new(HeadroomPool::new(1000));
        let sort = MemoryConsumer::new("sort").with_can_spill(true).register(&pool);
        let other = MemoryConsumer::new("other sort").with_can_spill(true).register(&pool);
        let merge = MemoryConsumer::new("merge").register(&pool);
        // Two spillers share 750: 375 each.
        sort.try_grow(375).unwrap();
        let e = sort.try_grow(1).unwrap_err().to_string();
        assert!(e.contains("Resources exhausted") && e.contains("sort"), "{e}");
        // One holding nothing may take what is free: the other spiller's share.
        other.try_grow(400).unwrap();
        // The merge grows into the rest, and no further.
        merge.try_grow(225).unwrap();
        assert_eq!(pool.reserved(), 1000);
        assert!(merge.try_grow(1).is_err());
        assert!(
            MemoryConsumer::new("empty").with_can_spill(true).register(&pool).try_grow(1).is_err()
        );
        // The merge's use shrinks the spillers' shares.
        drop(other);
        sort.resize(100);
        assert!(sort.try_grow(426).is_err());
        sort.try_grow(425).unwrap();
        drop(sort);
        drop(merge);
        assert_eq!(pool.reserved(), 0);
    }
}
