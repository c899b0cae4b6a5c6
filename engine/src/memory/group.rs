//! Write groups: concurrent writes of one memory store handed to one writer.
//!
//! Written one serializable transaction each, concurrent `remember`s would each take the
//! writer token in turn, and each commit would pay its own log write, publish and
//! memtable append; on few cores the waiting threads also lose their time slices queuing
//! for the token. A write group instead lets the first caller *lead*:
//! it takes every write queued at that moment and writes them in one transaction, while
//! the others wait until their outcome is set (yielding their core, then asleep: see
//! [`YIELD_FOR`]). Writes queued meanwhile form the next group, led by the oldest of them,
//! whom the leader tells when it is done (so no thread writes more than one group for
//! others).
//!
//! This module owns only the hand-off: queueing, choosing the leader, delivering outcomes
//! and waking. What a group writes, and how a failed group's writes are retried, is the
//! store's business. The leader is never left dangling: if it unwinds, every write of its
//! group gets the `abandoned` outcome and the lead passes on.
//!
//! Why a queue here when the storage's writer token deliberately has none (see
//! `basalt_storage`'s `writer.rs`): a waiter there is woken to run one short commit of its
//! own, so the wake-up was the larger cost. Here one hand-off replaces a whole transaction,
//! and a waiter that is still yielding needs no wake-up at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{Thread, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a queued write yields its core (`sched_yield` in a loop, checking its outcome
/// at every turn) before it sleeps until woken.
///
/// Used when a write waits for a group: a yielding waiter hands the core to the leader at
/// every turn and is given its outcome by a store, with no wake-up to pay, which is what
/// made concurrent writers fastest; spinning without yielding holds the core the leader
/// needs. Past the budget a waiter sleeps, so a long commit (a synced log, a flush) does
/// not keep its waiters busy. Measurements: `docs/design/write-path.md`, *Write groups*.
const YIELD_FOR: Duration = Duration::from_micros(200);

/// How many times a new leader yields before it takes the queue while fewer than half as
/// many writes as the last group took are queued.
///
/// Used when the queue is short: a finished group's writers come back within microseconds,
/// and a leader that took the queue at once found groups of one or two writes, where a
/// commit's fixed cost (about twice a write's) dominates; a turn or two lets them queue. A
/// caller writing alone (a last group of one) never waits. Measurements:
/// `docs/design/write-path.md`, *Write groups*.
const LINGER_TURNS: usize = 2;

/// What a queued write learns.
pub(super) enum Outcome<R> {
    /// Nothing yet.
    Waiting,
    /// Its thread is to lead the next group.
    Lead,
    /// Written (or failed): the result.
    Done(R),
}

struct TicketState<I, R> {
    input: Option<I>,
    outcome: Outcome<R>,
}

/// One queued write: its input (taken by the leader) and its outcome.
pub(super) struct Ticket<I, R> {
    state: Mutex<TicketState<I, R>>,
    thread: Thread,
    /// Set when its thread has stopped yielding and goes to sleep (tests wait for it).
    #[cfg(test)]
    slept: std::sync::atomic::AtomicBool,
}

impl<I, R> Ticket<I, R> {
    /// A write of `input` by the calling thread.
    pub(super) fn new(input: I) -> Self {
        Ticket {
            state: Mutex::new(TicketState { input: Some(input), outcome: Outcome::Waiting }),
            thread: std::thread::current(),
            #[cfg(test)]
            slept: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Waits until the write is done or its thread is to lead ([`Outcome::Waiting`] is
    /// never returned): first by yielding its core for up to [`YIELD_FOR`], then asleep.
    ///
    /// A yielding waiter stays runnable, so the leader delivers its outcome with a store
    /// the waiter sees at its next turn; a sleeping one costs the leader a `futex` wake-up.
    /// Those wake-ups were the largest share of a contended write (`perf` of
    /// `memory-bench --w4-only 6`, before: 29 % of the CPU time inside the timed windows in
    /// the leader's wake-ups, 18 % in the woken writers' return from sleep — on this VM a
    /// wake-up of a thread whose core is idle costs the waker about 4 µs). See
    /// [`YIELD_FOR`] for what yielding gained.
    pub(super) fn wait(&self) -> Outcome<R> {
        let start = Instant::now();
        let mut yielding = true;
        let mut turns = 0u32;
        loop {
            // (The lock is released before parking: the setter needs it.)
            let outcome = std::mem::replace(&mut self.state.lock().outcome, Outcome::Waiting);
            match outcome {
                Outcome::Waiting if yielding => {
                    std::thread::yield_now();
                    turns += 1;
                    // (The clock is read every eighth turn: a turn can be shorter.)
                    if turns.is_multiple_of(8) {
                        yielding = start.elapsed() < YIELD_FOR;
                    }
                }
                Outcome::Waiting => {
                    #[cfg(test)]
                    self.slept.store(true, Ordering::Relaxed);
                    std::thread::park();
                }
                other => return other,
            }
        }
    }

    fn set(&self, outcome: Outcome<R>) {
        self.state.lock().outcome = outcome;
        self.thread.unpark();
    }
}

struct Queue<I, R> {
    /// A thread leads a group (or has been told to).
    leading: bool,
    /// The thread writing a group now (set and cleared by that thread).
    leader: Option<ThreadId>,
    tickets: Vec<Arc<Ticket<I, R>>>,
}

/// The queue of one store's writes (see the module docs).
pub(super) struct WriteGroup<I, R> {
    queue: Mutex<Queue<I, R>>,
    /// How many writes the last group took (see [`LINGER_TURNS`]).
    last_group: AtomicUsize,
}

impl<I, R> Default for WriteGroup<I, R> {
    fn default() -> Self {
        WriteGroup {
            queue: Mutex::new(Queue { leading: false, leader: None, tickets: Vec::new() }),
            last_group: AtomicUsize::new(0),
        }
    }
}

impl<I, R> WriteGroup<I, R> {
    /// Whether the calling thread is writing a group right now: a write it makes meanwhile
    /// (from a commit hook the group's commit runs) must not queue, or it would wait for
    /// itself.
    pub(super) fn led_by_this_thread(&self) -> bool {
        self.queue.lock().leader == Some(std::thread::current().id())
    }

    /// How many writes are queued (not yet taken by a leader).
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        self.queue.lock().tickets.len()
    }

    /// Queues a write; true if its thread leads now (nobody did), false if it is to
    /// [`Ticket::wait`].
    pub(super) fn join(&self, ticket: &Arc<Ticket<I, R>>) -> bool {
        let mut q = self.queue.lock();
        q.tickets.push(ticket.clone());
        !std::mem::replace(&mut q.leading, true)
    }
}

/// The lead of one group: the writes queued when it was taken.
pub(super) struct Lead<'a, I, R> {
    group: &'a WriteGroup<I, R>,
    tickets: Vec<Arc<Ticket<I, R>>>,
    abandoned: fn() -> R,
    finished: bool,
}

impl<'a, I, R> Lead<'a, I, R> {
    /// Takes every queued write (the caller's own among them: it joined and was told to
    /// lead) — after yielding up to [`LINGER_TURNS`] times while fewer than half as many
    /// writes as the last group took are queued. `abandoned` is the outcome of each if the
    /// lead unwinds before finishing.
    pub(super) fn take(group: &'a WriteGroup<I, R>, abandoned: fn() -> R) -> Self {
        let want = group.last_group.load(Ordering::Relaxed) / 2;
        for _ in 0..LINGER_TURNS {
            if group.queue.lock().tickets.len() >= want {
                break;
            }
            std::thread::yield_now();
        }
        let mut q = group.queue.lock();
        q.leader = Some(std::thread::current().id());
        let tickets = std::mem::take(&mut q.tickets);
        drop(q);
        group.last_group.store(tickets.len(), Ordering::Relaxed);
        Lead { group, tickets, abandoned, finished: false }
    }

    /// The group's inputs, in queue order.
    pub(super) fn inputs(&self) -> Vec<I> {
        self.tickets.iter().filter_map(|t| t.state.lock().input.take()).collect()
    }

    /// Delivers `results` (one per input, in order) and returns the result of `own`.
    ///
    /// The lead passes on only after this group's writers are given their outcomes (when
    /// the lead is dropped): they queue their next writes meanwhile, so the next group is
    /// larger, and a commit's fixed cost is shared by more writes. Every scheme tried that
    /// started the next commit sooner (passing the lead first, chained or tree wake-ups, a
    /// leader writing several groups in a row, one `notify_all`) made groups smaller and
    /// ran slower; what paid was waking few writers at all ([`YIELD_FOR`]). The schemes and
    /// their figures: `docs/design/write-path.md`, *Write groups*.
    pub(super) fn finish(mut self, own: &Arc<Ticket<I, R>>, mut results: Vec<R>) -> R {
        if results.len() != self.tickets.len() {
            // Never hand a write another's result: all get `abandoned`.
            results.clear();
        }
        let mut mine = None;
        let mut results = results.into_iter();
        for t in &self.tickets {
            let r = results.next().unwrap_or_else(self.abandoned);
            if Arc::ptr_eq(t, own) {
                mine = Some(r);
            } else {
                t.set(Outcome::Done(r));
            }
        }
        self.finished = true;
        mine.unwrap_or_else(self.abandoned)
    }
}

impl<I, R> Drop for Lead<'_, I, R> {
    fn drop(&mut self) {
        if !self.finished {
            for t in &self.tickets {
                t.set(Outcome::Done((self.abandoned)()));
            }
        }
        // Tell the oldest queued write to lead the next group, or give the lead up.
        let mut q = self.group.queue.lock();
        q.leader = None;
        match q.tickets.first() {
            Some(next) => next.set(Outcome::Lead),
            None => q.leading = false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer of the test group: sums its inputs' values into `total` under the lead,
    /// recording the size of every group.
    fn write(
        group: &WriteGroup<u64, Result<u64, String>>,
        value: u64,
        total: &Mutex<(u64, Vec<usize>)>,
    ) -> Result<u64, String> {
        let ticket = Arc::new(Ticket::new(value));
        if !group.join(&ticket) {
            match ticket.wait() {
                Outcome::Done(r) => return r,
                Outcome::Lead | Outcome::Waiting => {}
            }
        }
        let lead = Lead::take(group, || Err("abandoned".into()));
        let inputs = lead.inputs();
        let mut t = total.lock();
        t.1.push(inputs.len());
        let results = inputs
            .iter()
            .map(|v| {
                t.0 += v;
                Ok(v * 10)
            })
            .collect();
        drop(t);
        std::thread::yield_now();
        lead.finish(&ticket, results)
    }

    #[test]
    fn every_write_gets_its_own_result_once_and_groups_form_under_contention() {
        let group = Arc::new(WriteGroup::default());
        let total = Arc::new(Mutex::new((0u64, Vec::new())));
        let handles: Vec<_> = (0..16u64)
            .map(|w| {
                let (group, total) = (group.clone(), total.clone());
                std::thread::spawn(move || {
                    (0..200u64)
                        .map(|i| {
                            let v = w * 1000 + i;
                            assert_eq!(write(&group, v, &total), Ok(v * 10));
                            v
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        let sum: u64 = handles.into_iter().map(|h| h.join().expect("writer")).sum();
        let t = total.lock();
        assert_eq!(t.0, sum, "every write applied exactly once");
        assert_eq!(t.1.iter().sum::<usize>(), 16 * 200);
        assert!(!group.queue.lock().leading, "the lead is given up at the end");
        assert!(group.queue.lock().tickets.is_empty());
    }

    #[test]
    fn the_leader_writes_every_write_queued_before_it_takes_the_lead() {
        let group: WriteGroup<u64, Result<u64, String>> = WriteGroup::default();
        let (a, b, c) =
            (Arc::new(Ticket::new(1)), Arc::new(Ticket::new(2)), Arc::new(Ticket::new(3)));
        assert!(group.join(&a));
        assert!(!group.join(&b) && !group.join(&c), "later writes wait");
        assert!(!group.led_by_this_thread());
        let lead = Lead::take(&group, || Err("abandoned".into()));
        assert!(group.led_by_this_thread(), "a nested write would know");
        assert_eq!(lead.inputs(), vec![1, 2, 3], "one group, in queue order");
        assert_eq!(group.last_group.load(Ordering::Relaxed), 3, "the next leader's yardstick");
        let d = Arc::new(Ticket::new(4));
        assert!(!group.join(&d), "a write queued during the lead waits for the next group");
        assert_eq!(lead.finish(&a, vec![Ok(10), Ok(20), Err("bad".into())]), Ok(10));
        assert!(matches!(b.wait(), Outcome::Done(Ok(20))));
        assert!(matches!(c.wait(), Outcome::Done(Err(e)) if e == "bad"), "results are per write");
        assert!(matches!(d.wait(), Outcome::Lead), "the next queued write leads");
        let e = Arc::new(Ticket::new(5));
        assert!(!group.join(&e));
        // Two queued, at least half the last group: taken without lingering (and a leader
        // never lingers for more than `LINGER_TURNS` turns in any case).
        let lead = Lead::take(&group, || Err("abandoned".into()));
        assert_eq!(lead.inputs(), vec![4, 5]);
        // Results that do not match the writes one to one are nobody's.
        assert_eq!(lead.finish(&d, vec![Ok(40)]), Err("abandoned".into()));
        assert!(matches!(e.wait(), Outcome::Done(Err(m)) if m == "abandoned"));
        assert!(!group.queue.lock().leading);
        assert!(!group.led_by_this_thread());
    }

    #[test]
    fn a_waiter_past_its_yield_budget_sleeps_and_is_woken_with_its_outcome() {
        let group: Arc<WriteGroup<u64, Result<u64, String>>> = Arc::new(WriteGroup::default());
        let own = Arc::new(Ticket::new(1));
        assert!(group.join(&own), "the first write leads");
        let (tx, rx) = std::sync::mpsc::channel();
        let g = group.clone();
        std::thread::spawn(move || {
            let t = Arc::new(Ticket::new(2));
            assert!(!g.join(&t), "a second write waits");
            let r = t.wait();
            tx.send(matches!(r, Outcome::Done(Ok(20)))).expect("send");
        });
        while group.queued() < 2 {
            std::thread::yield_now();
        }
        let lead = Lead::take(&group, || Err("abandoned".into()));
        assert_eq!(lead.inputs(), vec![1, 2]);
        // The outcome is set only once the waiter has stopped yielding and gone to sleep.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !lead.tickets[1].slept.load(Ordering::Relaxed) {
            assert!(Instant::now() < deadline, "the waiter never went to sleep");
            std::thread::yield_now();
        }
        assert_eq!(lead.finish(&own, vec![Ok(10), Ok(20)]), Ok(10));
        let woken = rx.recv_timeout(Duration::from_secs(20));
        assert_eq!(woken, Ok(true), "the sleeping waiter was woken with its own outcome");
    }

    #[test]
    fn an_unwinding_leader_fails_its_group_and_passes_the_lead_on() {
        let group: Arc<WriteGroup<u64, Result<u64, String>>> = Arc::new(WriteGroup::default());
        let own = Arc::new(Ticket::new(1));
        assert!(group.join(&own), "the first write leads");
        let lead = Lead::take(&group, || Err("abandoned".into()));
        // A second write queues while the first group is being written.
        let (tx, rx) = std::sync::mpsc::channel();
        let g = group.clone();
        let waiter = std::thread::spawn(move || {
            let t = Arc::new(Ticket::new(2));
            assert!(!g.join(&t), "a write queued during a lead waits");
            tx.send(()).expect("send");
            matches!(t.wait(), Outcome::Lead)
        });
        rx.recv().expect("queued");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _inputs = lead.inputs();
            panic!("the writer failed");
        }));
        assert!(r.is_err());
        assert!(matches!(own.wait(), Outcome::Done(Err(e)) if e == "abandoned"));
        assert!(waiter.join().expect("waiter"), "the queued write was told to lead");
        assert!(group.queue.lock().leading);
    }
}
