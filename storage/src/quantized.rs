//! Quantised copies of vector blocks kept for quantised searches (int8 / float16 ranking
//! with exact rescoring), within one bound for the whole process.
//!
//! A segment keeps the copies of its row-group parts, a memtable batch those of its
//! columns ([`Copies`]); each copy kept counts against [`Budget::global`], a quarter of
//! the machine's memory. When a copy does not fit, the search that built it ranks on it
//! and drops it: the search still runs, at the cost of quantising that part again next
//! time, and the memory kept never grows past the bound (the copies of a search in
//! progress, one per part being searched, come on top). A cache's copies leave the
//! budget when the cache is dropped (its segment or batch is gone).
//!
//! What this module must not do: keep a copy the budget refused, or compute distances.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use basalt_vector::Quantized;

/// A bound on the bytes of the quantised copies kept, shared by the caches using it.
#[derive(Debug)]
pub struct Budget {
    limit: usize,
    used: AtomicUsize,
}

static GLOBAL: LazyLock<Budget> =
    LazyLock::new(|| Budget::new(machine_memory().map_or(1 << 30, |m| m / 4)));

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Budget {
        Budget { limit, used: AtomicUsize::new(0) }
    }

    /// The process's budget: a quarter of the machine's memory (1 GiB where it cannot be
    /// read).
    pub fn global() -> &'static Budget {
        &GLOBAL
    }

    /// Bytes counted now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Counts `n` more bytes when they fit.
    fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The machine's physical memory in bytes (Linux; `None` where it cannot be read).
pub fn machine_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Quantised copies by key, kept while the budget allows.
#[derive(Debug)]
pub struct Copies<K> {
    kept: HashMap<K, Arc<Quantized>>,
    bytes: usize,
    budget: &'static Budget,
}

impl<K> Default for Copies<K> {
    fn default() -> Self {
        Copies { kept: HashMap::new(), bytes: 0, budget: Budget::global() }
    }
}

impl<K: Hash + Eq> Copies<K> {
    /// An empty cache counting against `budget`.
    pub fn with_budget(budget: &'static Budget) -> Self {
        Copies { kept: HashMap::new(), bytes: 0, budget }
    }

    /// The copy under `key`: the kept one, or one `build` makes — kept when the budget
    /// has room for it. Concurrent first users may both build it; one copy is kept.
    pub fn get_or_build(
        this: &parking_lot::Mutex<Self>,
        key: K,
        build: impl FnOnce() -> Quantized,
    ) -> Arc<Quantized> {
        if let Some(q) = this.lock().kept.get(&key) {
            return q.clone();
        }
        let q = Arc::new(build());
        let mut me = this.lock();
        if let Some(kept) = me.kept.get(&key) {
            return kept.clone();
        }
        if me.budget.take(q.bytes()) {
            me.bytes += q.bytes();
            me.kept.insert(key, q.clone());
        }
        q
    }

    /// Bytes of the copies kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl<K> Drop for Copies<K> {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use basalt_vector::Quantization;

    use super::*;

    #[test]
    fn copies_are_kept_while_the_budget_has_room_and_given_back_when_dropped() {
        // Four rows of two components: 8 codes and 4 norms (24 bytes) a copy.
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(50)));
        let values = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let build = || Quantized::encode(Quantization::Int8, &values, 2);
        let size = build().bytes();
        assert_eq!(size, 24);
        let a = parking_lot::Mutex::new(Copies::with_budget(budget));
        let b = parking_lot::Mutex::new(Copies::with_budget(budget));
        let first = Copies::get_or_build(&a, 1, build);
        assert!(Arc::ptr_eq(&first, &Copies::get_or_build(&a, 1, || unreachable!("kept"))));
        Copies::get_or_build(&b, 1, build);
        assert_eq!(budget.used(), 48);
        // No room: built, used, not kept.
        let mut built = 0;
        for _ in 0..2 {
            Copies::get_or_build(&a, 2, || {
                built += 1;
                build()
            });
        }
        assert_eq!((built, a.lock().bytes(), budget.used()), (2, 24, 48));
        // A dropped cache gives its bytes back; the next copy is kept.
        drop(b);
        assert_eq!(budget.used(), 24);
        Copies::get_or_build(&a, 2, build);
        assert_eq!((a.lock().bytes(), budget.used()), (48, 48));
        drop(a);
        assert_eq!(budget.used(), 0);
    }
}
