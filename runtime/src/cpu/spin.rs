//! A small spin-then-park worker pool that keeps its workers hot for the
//! duration of one run.
//!
//! Waking a sleeping rayon worker costs ~100-200 µs on a shared 2-vCPU
//! machine, so the caller often finishes both halves of a split before the
//! worker starts. While a run owns this pool ([`SpinPool::run`]), its
//! workers poll an atomic job slot instead of sleeping, so a hand-off costs
//! a cache-line transfer (~1 µs); when the run ends they park on a condvar.
//!
//! Only one run at a time owns the pool; a concurrent run (or a nested
//! split inside a task) falls back to `rayon::scope` on the current pool, or
//! runs its tasks inline on a thread outside any rayon pool. Every path runs
//! the same tasks `0..n`, so results do not depend on which one was taken.

use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// One split call: tasks `0..n` of `f`. Up to 64 tasks are claimed by
/// bit, more by an atomic counter. Claims keep task `t` of every split on
/// the same thread, so when consecutive kernels split the same way (the
/// pixel halves of a pointwise conv and the row bands of the depthwise conv
/// after it) each task reads what its own core wrote: a cache line from
/// the other core's L2 streams at ~24 GB/s here, from its own at ~85.
/// - A kernel's split ([`par_for`], `ranges` = the participants) gives
///   each participant a contiguous home range of tasks (the owner the
///   first, worker `w` range `w + 1`), taken from the front; a participant
///   done with its own takes the last free task, from the back of another
///   range. With as many tasks as participants that is one home task each;
///   with more, a core the host has stalled loses its range's tail to the
///   other instead of holding up the whole split.
/// - A wave of independent steps ([`par_for_list`], `ranges` = 0) starts
///   each participant on its home task, then hands out the free ones in
///   order: a list schedule, which the wave planner's estimate assumes,
///   where home ranges would tie a long step's successors to its thread.
struct Job<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    n: usize,
    next: AtomicUsize,
    /// Tasks claimed, one bit each, when `n <= 64`.
    claimed: std::sync::atomic::AtomicU64,
    /// Participants with contiguous home ranges, or 0 for list order.
    ranges: usize,
    done: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    /// Claims and runs tasks until none is left, starting with participant
    /// `who`'s home task or range (see [`Job`]); a participant that
    /// arrives late, or finishes early, takes the others' tasks.
    fn work(&self, who: usize) {
        if self.n <= 64 {
            let all = u64::MAX >> (64 - self.n);
            let home = if let Some(lo) = (who * self.n).checked_div(self.ranges) {
                bits_below((who + 1) * self.n / self.ranges) & !bits_below(lo)
            } else if who < self.n {
                1u64 << who
            } else {
                0
            };
            loop {
                let free = !self.claimed.load(Ordering::Relaxed) & all;
                if free == 0 {
                    return;
                }
                let i = if free & home != 0 {
                    (free & home).trailing_zeros() as usize
                } else if self.ranges > 0 {
                    63 - free.leading_zeros() as usize
                } else {
                    free.trailing_zeros() as usize
                };
                let bit = 1u64 << i;
                if self.claimed.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                    continue;
                }
                self.run(i);
            }
        }
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            self.run(i);
        }
    }

    /// Runs claimed task `i`, keeping the first panic.
    fn run(&self, i: usize) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| (self.f)(i))) {
            if let Ok(mut slot) = self.panic.lock() {
                slot.get_or_insert(p);
            }
        }
        self.done.fetch_add(1, Ordering::Release);
    }
}

/// The bits of tasks `0..k`.
fn bits_below(k: usize) -> u64 {
    if k >= 64 {
        u64::MAX
    } else {
        (1u64 << k) - 1
    }
}

/// State shared by the owner and the workers.
struct Shared {
    /// The job in flight (a `Job` on the owner's stack), or null.
    job: AtomicPtr<Job<'static>>,
    /// Workers between loading `job` and being done with it; the owner
    /// waits for 0 before its `Job` goes out of scope.
    inside: AtomicUsize,
    /// A run owns the pool: workers spin instead of parking.
    active: AtomicBool,
    /// When the last run released the pool (µs since `epoch`): workers
    /// keep polling for [`SPIN_WINDOW`] after it, so a run that follows
    /// at once (a serving loop, `dnnc bench`) finds them hot instead of
    /// waking them for its first split.
    released_us: std::sync::atomic::AtomicU64,
    epoch: std::time::Instant,
    /// Taken by the run that owns the pool.
    owned: AtomicBool,
    /// The owner and the workers: how many home ranges a split has.
    participants: usize,
    shutdown: AtomicBool,
    /// Workers parked (or about to park) on `wake`; a job wakes them.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

/// Worker threads that spin while a run owns them (see the module doc).
pub struct SpinPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for SpinPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinPool")
            .field("workers", &self.workers.len())
            .finish()
    }
}

thread_local! {
    /// The pool the current thread owns for this run (null otherwise, and
    /// while it runs a task, so nested splits never re-enter it).
    static OWNED: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
}

/// One polling step: yields the core rather than burning it, so on a
/// shared machine a spinning thread does not take time slices from the
/// thread doing the work (pure `spin_loop` polling made 2-thread runs 2-3x
/// slower here when other processes were busy); a yield still returns in
/// ~1 µs when the core is otherwise idle.
fn relax() {
    for _ in 0..32 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

/// How long a worker keeps polling after its last job before it parks,
/// even while a run owns the pool: consecutive splits (a GEMM-heavy stretch
/// of a network) find it hot, while a long unsplit kernel does not have a
/// second thread burning a core beside it (on this shared, oversubscribed
/// 2-vCPU machine spinning for a whole run made 2-thread runs slower).
const SPIN_WINDOW: std::time::Duration = std::time::Duration::from_micros(300);

fn worker(s: Arc<Shared>, home: usize) {
    let mut since = std::time::Instant::now();
    loop {
        if !s.job.load(Ordering::Relaxed).is_null() {
            s.inside.fetch_add(1, Ordering::SeqCst);
            let p = s.job.load(Ordering::SeqCst);
            if !p.is_null() {
                // SAFETY: the owner keeps the job alive until `inside`
                // drops to 0 after it cleared `job` (see `Shared::inside`).
                unsafe { (*p).work(home) };
            }
            s.inside.fetch_sub(1, Ordering::SeqCst);
            since = std::time::Instant::now();
        } else if s.active.load(Ordering::Relaxed) && since.elapsed() < SPIN_WINDOW
            || s.since_release() < SPIN_WINDOW
        {
            relax();
        } else {
            let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            if s.shutdown.load(Ordering::SeqCst) {
                return;
            }
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            if s.job.load(Ordering::SeqCst).is_null() && !s.shutdown.load(Ordering::SeqCst) {
                drop(s.wake.wait(g).unwrap_or_else(|e| e.into_inner()));
            } else {
                drop(g);
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
            since = std::time::Instant::now();
        }
    }
}

impl Shared {
    /// Time since the last run released the pool.
    fn since_release(&self) -> std::time::Duration {
        let at = std::time::Duration::from_micros(self.released_us.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(at)
    }
}

impl SpinPool {
    /// A pool whose `workers` threads (plus the calling thread) share
    /// split work; the workers start parked.
    pub fn new(workers: usize) -> Result<Self, String> {
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            inside: AtomicUsize::new(0),
            active: AtomicBool::new(false),
            owned: AtomicBool::new(false),
            participants: workers + 1,
            shutdown: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            released_us: std::sync::atomic::AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut pool = SpinPool {
            shared,
            workers: Vec::new(),
        };
        for i in 0..workers {
            let s = pool.shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("dnnc-spin-{i}"))
                .spawn(move || worker(s, i + 1))
                .map_err(|e| format!("cannot start a worker thread: {e}"))?;
            pool.workers.push(h);
        }
        Ok(pool)
    }

    /// Runs `f` with the workers hot and [`par_for`] on this thread using
    /// them, if no other run owns the pool; otherwise just runs `f` (its
    /// splits then fall back to rayon).
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match self.own() {
            Some(_end) => f(),
            None => f(),
        }
    }

    /// Runs `owned` on this thread with the workers hot if no other run
    /// owns the pool, else `otherwise` (e.g. the same work handed to a
    /// rayon pool, whose splits then use it).
    pub fn run_or<R>(&self, owned: impl FnOnce() -> R, otherwise: impl FnOnce() -> R) -> R {
        match self.own() {
            Some(_end) => owned(),
            None => otherwise(),
        }
    }

    /// Takes the pool for this thread's run (workers spin, [`par_for`]
    /// hands them tasks) until the guard drops; `None` if another run
    /// owns it.
    fn own(&self) -> Option<Owned<'_>> {
        let s = &*self.shared;
        if s.owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.active.store(true, Ordering::SeqCst);
            if s.sleeping.load(Ordering::SeqCst) > 0 {
                s.wake.notify_all();
            }
        }
        Some(Owned(s, OWNED.with(|o| o.replace(s))))
    }
}

/// A run's ownership of a [`SpinPool`]; dropping it lets the workers park
/// and restores this thread's previous pool.
struct Owned<'a>(&'a Shared, *const Shared);

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        OWNED.with(|o| o.set(self.1));
        let now = self.0.epoch.elapsed().as_micros() as u64;
        self.0.released_us.store(now, Ordering::Relaxed);
        self.0.active.store(false, Ordering::SeqCst);
        self.0.owned.store(false, Ordering::Release);
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::SeqCst);
            self.shared.active.store(false, Ordering::SeqCst);
            self.shared.wake.notify_all();
        }
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Whether this thread owns a [`SpinPool`] run, so [`par_for`] here hands
/// tasks to hot workers (a split then costs ~1-2 µs, not a wake-up).
pub fn owns_pool() -> bool {
    OWNED.with(|o| !o.get().is_null())
}

/// Runs tasks `0..n` of `f`, the parts of one kernel's work, and returns
/// when all are done: on the hot workers when this thread owns a
/// [`SpinPool`] run, else on the current rayon pool, else inline. On the
/// workers each participant takes a contiguous home range of the tasks
/// (the caller the first) from the front, then the last free task of
/// another range, so task `t` of consecutive splits stays on one core and
/// a stalled core loses its range's tail. The calling thread takes part;
/// a panicking task panics here after all tasks finished.
pub fn par_for(n: usize, f: &(dyn Fn(usize) + Sync)) {
    split(n, f, true)
}

/// [`par_for`] for independent steps of a concurrent wave: after its home
/// task each participant takes the next free one in order.
pub fn par_for_list(n: usize, f: &(dyn Fn(usize) + Sync)) {
    split(n, f, false)
}

/// [`par_for`] (`ranged`) or [`par_for_list`].
fn split(n: usize, f: &(dyn Fn(usize) + Sync), ranged: bool) {
    if n <= 1 {
        if n == 1 {
            f(0);
        }
        return;
    }
    let s = OWNED.with(|o| o.replace(std::ptr::null()));
    if s.is_null() {
        if rayon::current_thread_index().is_some() {
            rayon::scope(|sc| {
                for i in 1..n {
                    sc.spawn(move |_| f(i));
                }
                f(0);
            });
        } else {
            (0..n).for_each(f);
        }
        return;
    }
    struct Restore(*const Shared);
    impl Drop for Restore {
        fn drop(&mut self) {
            OWNED.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(s);
    // SAFETY: the pool outlives the run that set OWNED on this thread.
    let s = unsafe { &*s };
    let job = Job {
        f,
        n,
        next: AtomicUsize::new(0),
        claimed: std::sync::atomic::AtomicU64::new(0),
        ranges: if ranged { s.participants } else { 0 },
        done: AtomicUsize::new(0),
        panic: Mutex::new(None),
    };
    // SAFETY: the pointer is cleared, and every worker that loaded it has
    // left (`inside == 0`), before `job` goes out of scope below.
    let p = &job as *const Job<'_> as *mut Job<'static>;
    s.job.store(p, Ordering::SeqCst);
    if s.sleeping.load(Ordering::SeqCst) > 0 {
        let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    job.work(0);
    while job.done.load(Ordering::Acquire) < n {
        relax();
    }
    s.job.store(std::ptr::null_mut(), Ordering::SeqCst);
    while s.inside.load(Ordering::SeqCst) != 0 {
        relax();
    }
    let panic = job.panic.lock().ok().and_then(|mut p| p.take());
    if let Some(p) = panic {
        resume_unwind(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn counts(n: usize) -> Vec<AtomicU32> {
        (0..n).map(|_| AtomicU32::new(0)).collect()
    }

    /// The order in which participant `who` alone runs a job of `n`
    /// tasks with `ranges` home ranges (0: list order).
    fn claim_order(n: usize, ranges: usize, who: usize) -> Vec<usize> {
        let order = Mutex::new(Vec::new());
        let f = |i: usize| order.lock().unwrap().push(i);
        let job = Job {
            f: &f,
            n,
            next: AtomicUsize::new(0),
            claimed: std::sync::atomic::AtomicU64::new(0),
            ranges,
            done: AtomicUsize::new(0),
            panic: Mutex::new(None),
        };
        job.work(who);
        assert_eq!(job.done.load(Ordering::Relaxed), n);
        drop(job);
        order.into_inner().unwrap()
    }

    /// Each participant starts with its home task, then takes the free
    /// ones in order; past 64 tasks the counter hands them out.
    #[test]
    fn participants_start_with_their_home_task() {
        for n in [3usize, 64, 65] {
            let want: Vec<usize> = if n <= 64 {
                std::iter::once(2)
                    .chain((0..n).filter(|&i| i != 2))
                    .collect()
            } else {
                (0..n).collect()
            };
            assert_eq!(claim_order(n, 0, 2), want, "{n} tasks");
        }
    }

    /// A kernel's split: each participant works its own range from the
    /// front, then takes the last free task (another range's tail).
    #[test]
    fn ranged_participants_take_their_range_then_steal_from_the_back() {
        for (n, ranges, who, want) in [
            (8, 2, 0, vec![0, 1, 2, 3, 7, 6, 5, 4]),
            (8, 2, 1, vec![4, 5, 6, 7, 3, 2, 1, 0]),
            (3, 2, 0, vec![0, 2, 1]),
            (3, 2, 1, vec![1, 2, 0]),
            (2, 2, 1, vec![1, 0]),
            (64, 2, 1, (32..64).chain((0..32).rev()).collect()),
        ] {
            assert_eq!(claim_order(n, ranges, who), want, "{n} tasks, who {who}");
        }
    }

    #[test]
    fn every_task_runs_exactly_once() {
        let pool = SpinPool::new(1).unwrap();
        pool.run(|| {
            for n in [2, 3, 7, 64] {
                for _ in 0..50 {
                    let c = counts(n);
                    par_for(n, &|i| {
                        c[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 1));
                    let c = counts(n);
                    par_for_list(n, &|i| {
                        c[i].fetch_add(1, Ordering::Relaxed);
                    });
                    assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 1));
                }
            }
        });
    }

    #[test]
    fn nested_and_concurrent_use_does_not_deadlock() {
        let pool = Arc::new(SpinPool::new(2).unwrap());
        let rayon_pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        std::thread::scope(|ts| {
            for _ in 0..2 {
                let pool = &pool;
                let rayon_pool = &rayon_pool;
                ts.spawn(move || {
                    for _ in 0..100 {
                        let c = counts(4 * 5);
                        rayon_pool.install(|| {
                            pool.run(|| {
                                par_for(4, &|i| {
                                    par_for(5, &|k| {
                                        c[i * 5 + k].fetch_add(1, Ordering::Relaxed);
                                    })
                                })
                            })
                        });
                        assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 1));
                    }
                });
            }
        });
    }

    #[test]
    fn panics_propagate_after_all_tasks() {
        let pool = SpinPool::new(1).unwrap();
        let c = counts(8);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|| {
                par_for(8, &|i| {
                    c[i].fetch_add(1, Ordering::Relaxed);
                    if i == 3 {
                        panic!("task 3");
                    }
                })
            })
        }));
        assert!(r.is_err());
        assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 1));
        // The pool is usable again afterwards.
        pool.run(|| {
            par_for(2, &|i| {
                c[i].fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(c[0].load(Ordering::Relaxed), 2);
    }

    #[test]
    fn outside_a_run_the_pool_is_not_used() {
        let pool = SpinPool::new(1).unwrap();
        let c = counts(3);
        par_for(3, &|i| {
            assert!(OWNED.with(|o| o.get().is_null()));
            c[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(c.iter().all(|x| x.load(Ordering::Relaxed) == 1));
        assert!(!pool.shared.owned.load(Ordering::Relaxed));
    }
}
