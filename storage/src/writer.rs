//! The writer token: who may write right now, and how the others wait.
//!
//! One writer at a time (an auto-commit write, a write transaction, DDL, a flush) holds the
//! token; it is an owned guard, so a transaction keeps it across calls and threads. This
//! module owns how writers wait; what a writer does is `txn.rs`'s business.
//!
//! # Waiting policy
//!
//! Releasing the token is one atomic store — never a system call, nobody is woken. A writer
//! that finds the token taken spins briefly, then sleeps and retries until its lock-wait
//! timeout. The first sleep scales with the contention: [`NAP_FACTOR`] × the number of
//! writers waiting × the recent average time the token is held (an exponentially weighted
//! mean updated at every release), clamped to [`MIN_NAP`]..[`MAX_NAP`]; each further sleep
//! doubles, up to [`MAX_NAP`].
//!
//! So a writer behind one short commit retries after about a hundred microseconds, and
//! when many threads write on few cores the waiters sleep long enough not to keep waking up
//! while the running writer commits again and again — it keeps the token while it runs,
//! and they get it between its commits. This is SQLite's busy-handler policy with a first
//! sleep scaled to the contention instead of a fixed millisecond.
//!
//! Why not a queue: a mutex that parks waiters and wakes one at every release (the first
//! design, `parking_lot`) made every contended commit pay a `futex` wake-up and a context
//! switch, which cost more than the commit itself with 16 writer threads on 2 cores; a
//! leader/follower write group (one transaction for every queued write) did not help
//! either (0.72–1.03 of SQLite's throughput), because each follower still sleeps and is
//! woken once per write. The price of
//! this policy is fairness: a waiter can be overtaken, and under heavy contention tail
//! latency is milliseconds. A waiter still never fails before its timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shortest sleep of a waiting writer.
pub(crate) const MIN_NAP: Duration = Duration::from_micros(20);
/// Longest sleep of a waiting writer between two attempts.
pub(crate) const MAX_NAP: Duration = Duration::from_millis(2);
/// The first sleep is this many times (writers waiting × mean hold time). A running writer
/// that commits in a loop takes the token back at once, so a waiter only gets it in the
/// short gap between two of its commits: fewer futile wake-ups leave more of the cores to
/// the writer (measured with 16 writer threads on 2 cores, `write-path`: factors 1, 4 and
/// 16 gave 1.17, 1.25–1.50 and 1.41–1.87 of SQLite's buffered throughput).
const NAP_FACTOR: u32 = 16;
/// Attempts, separated by a spin hint, before a waiter starts sleeping.
const SPINS: u32 = 100;

/// The lock behind the writer token.
#[derive(Debug, Default)]
pub(crate) struct WriterLock {
    held: AtomicBool,
    /// Writers sleeping for the token.
    waiting: AtomicU32,
    /// Exponentially weighted mean of how long the token is held, in nanoseconds.
    mean_hold_ns: AtomicU64,
}

/// Holding this is being *the* writer; dropping it lets the next writer in.
pub(crate) struct WriterToken {
    lock: Arc<WriterLock>,
    since: Instant,
}

impl std::fmt::Debug for WriterToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriterToken")
    }
}

impl Drop for WriterToken {
    fn drop(&mut self) {
        let held = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mean = self.lock.mean_hold_ns.load(Ordering::Relaxed);
        self.lock.mean_hold_ns.store(next_mean(mean, held), Ordering::Relaxed);
        self.lock.held.store(false, Ordering::Release);
    }
}

impl WriterLock {
    /// Takes the token if it is free.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<WriterToken> {
        self.held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| WriterToken { lock: self.clone(), since: Instant::now() })
    }

    /// Takes the token, waiting up to `timeout` for it (see the module docs for how).
    pub(crate) fn acquire_for(self: &Arc<Self>, timeout: Duration) -> Option<WriterToken> {
        if let Some(t) = self.try_acquire() {
            return Some(t);
        }
        for _ in 0..SPINS {
            std::hint::spin_loop();
            if !self.held.load(Ordering::Relaxed)
                && let Some(t) = self.try_acquire()
            {
                return Some(t);
            }
        }
        let start = Instant::now();
        let ahead = self.waiting.fetch_add(1, Ordering::Relaxed) + 1;
        let _waiting = Waiting(self);
        let mean = Duration::from_nanos(self.mean_hold_ns.load(Ordering::Relaxed));
        let mut nap = mean.saturating_mul(ahead.saturating_mul(NAP_FACTOR)).clamp(MIN_NAP, MAX_NAP);
        loop {
            if let Some(t) = self.try_acquire() {
                return Some(t);
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return None;
            }
            std::thread::sleep(nap.min(timeout - waited));
            nap = (nap * 2).min(MAX_NAP);
        }
    }
}

/// The hold-time mean after one more hold: `mean += (held - mean) / 8`, without overflow
/// for long transactions.
fn next_mean(mean: u64, held: u64) -> u64 {
    if held >= mean { mean + (held - mean) / 8 } else { mean - (mean - held) / 8 }
}

/// Counts a sleeping writer while it lives.
struct Waiting<'a>(&'a WriterLock);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_release_on_drop() {
        let lock = Arc::new(WriterLock::default());
        let t = lock.try_acquire().expect("free");
        assert!(lock.try_acquire().is_none());
        assert!(lock.acquire_for(Duration::from_millis(5)).is_none());
        assert_eq!(lock.waiting.load(Ordering::Relaxed), 0, "a timed-out waiter is uncounted");
        drop(t);
        assert!(lock.acquire_for(Duration::ZERO).is_some());
    }

    #[test]
    fn waiters_get_the_token_after_a_long_holder_and_exclusion_holds() {
        let lock = Arc::new(WriterLock::default());
        let counter = Arc::new(std::sync::Mutex::new((0u64, false)));
        let first = lock.try_acquire().expect("free");
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (lock, counter) = (lock.clone(), counter.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _t = lock.acquire_for(Duration::from_secs(30)).expect("in time");
                        let mut c = counter.lock().expect("counter");
                        assert!(!c.1, "two holders at once");
                        c.1 = true;
                        drop(c);
                        std::hint::spin_loop();
                        let mut c = counter.lock().expect("counter");
                        c.0 += 1;
                        c.1 = false;
                    }
                })
            })
            .collect();
        drop(first);
        for h in handles {
            h.join().expect("thread");
        }
        assert_eq!(counter.lock().expect("counter").0, 1600);
        assert_eq!(lock.waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_mean_hold_time_follows_the_holders() {
        let mut mean = 0;
        for _ in 0..64 {
            mean = next_mean(mean, 1_000_000);
        }
        assert!((999_000..=1_000_000).contains(&mean), "mean {mean} ns after 1 ms holds");
        for _ in 0..64 {
            mean = next_mean(mean, 0);
        }
        assert!(mean < 1_000, "mean {mean} ns after instant holds");
        assert_eq!(next_mean(0, u64::MAX), u64::MAX / 8, "a very long hold does not overflow");
    }
}
