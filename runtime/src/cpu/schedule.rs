//! The compile-time schedule of an executable's steps: *waves* of steps
//! with no dependencies among them, and per wave the Work-Depth decision
//! whether its steps run concurrently on the thread pool or one after
//! another with intra-op splitting.
//!
//! # Dependencies
//!
//! Two steps depend on each other when they touch the same buffer (aliases
//! resolved to the buffer they view) and at least one of them writes it
//! ([`Step::writes`]): read-after-write, write-after-read and
//! write-after-write all order them. Weights are never written, so sharing
//! them creates no dependency. A step's wave is its ASAP level (one more
//! than the latest wave it depends on); a step that depends on no step
//! (it reads only inputs and weights) goes as late as possible instead
//! (one wave before its first consumer), so it does not hold memory from
//! the start of the run.
//!
//! # The W-D rule
//!
//! With `p` threads, `O =` [`TASK_OVERHEAD_MACS`] and per step its work
//! `W` and the part `S <= W` done by GEMMs that `dnnc_sgemm` splits
//! ([`Step::work`], [`Step::split_work`]), a step on `q` threads takes
//! `t(q) = (W - S) + S / s + O (s - 1)` with `s = min(q, max(1, S / 4O))`
//! slices (the rule of [`super::native::gemm_tasks`]). A wave of `k >= 2`
//! steps costs
//!
//! - sequentially: `T_seq = Σ t_i(p)` (each step splits its own GEMMs);
//! - concurrently: each step gets `q = max(1, p / k)` threads and the steps
//!   are spread over `p / q` workers longest first; `T_conc` is that
//!   makespan plus `O (k - 1)` for handing `k - 1` steps to other threads.
//!
//! It runs concurrently iff `T_conc < T_seq`.
//!
//! # Splitting one kernel
//!
//! A step that runs alone (not in a concurrent wave) and whose kernel
//! declares a split extent `E = ` [`Step::split`] `> 1` runs as
//! `T = min(p, E, max(1, W / KERNEL_TASK_MIN_WORK))` tasks
//! ([`kernel_tasks`]): each share must carry at least
//! [`KERNEL_TASK_MIN_WORK`] of work, four times the hand-off overhead
//! [`KERNEL_TASK_OVERHEAD`]. Both are in the step's own work units: for
//! the generated non-GEMM loops (elementwise, pooling, depthwise,
//! reductions) one unit is one element or tap, and they run ~2-3 units per
//! ns. The hand-off is dominated by waking a pool worker that went to
//! sleep since the last parallel step: measured ~100-200 µs on this
//! machine class (2 virtual CPUs; a MaxPool of 7.2M units, ~2.6 ms, ran
//! 1.9x faster on 2 tasks, a depthwise conv of 2.7M units, ~0.4 ms, not
//! faster at all, because the calling thread had finished both shares
//! before the other worker woke), so ~100 µs = 250k units. With spinning
//! workers (the default, `Executable::set_spinning`) a hand-off is a
//! cache-line transfer, budgeted at [`KERNEL_TASK_OVERHEAD_SPIN`] (~2 µs),
//! and the rule uses that instead ([`task_overhead`]). Such a step on `q` threads takes `W / T + KERNEL_TASK_OVERHEAD
//! (T - 1)` in the wave estimates below. Kernels with GEMM work (`S > 0`)
//! never split this way (their GEMMs do). Work counts one op per
//! multiply-accumulate or element as in the W-D model (`dnnc-passes::wd`);
//! steps of one wave are independent, so the order they finish in cannot
//! change any result.

use super::native::TASK_OVERHEAD_MACS;
use super::{BufId, Buffer, BufferKind, Step};

/// How waves of several independent steps are run (with more than one
/// thread; one thread always runs the steps in compile order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Concurrency {
    /// The W-D rule decides per wave (the default).
    #[default]
    Auto,
    /// Every wave of two or more steps runs concurrently, whatever the
    /// estimate says (for tests and measurements).
    Always,
    /// No wave runs concurrently: steps run in compile order and only
    /// GEMMs split across threads.
    Never,
}

/// A set of steps with no dependencies among them, and how it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Wave {
    /// Step indices, ascending.
    pub steps: Vec<usize>,
    /// Whether the steps run concurrently on the pool.
    pub concurrent: bool,
    /// Threads each step may split its GEMMs over: the run's thread count
    /// for a sequential wave, `max(1, p / k)` for a concurrent one.
    pub threads_per_step: usize,
    /// Estimate of running the steps one after another, in the deciding
    /// [`CostModel`]'s unit ([`CostModel::unit`]).
    pub est_sequential: f64,
    /// Estimate of running them concurrently, in the same unit.
    pub est_concurrent: f64,
}

/// The buffer each buffer's memory belongs to (aliases followed).
pub(crate) fn roots(buffers: &[Buffer]) -> Vec<BufId> {
    let mut r: Vec<BufId> = (0..buffers.len()).collect();
    for (i, b) in buffers.iter().enumerate() {
        if let BufferKind::Alias { of, .. } = b.kind {
            // Aliases refer only to earlier buffers, already resolved.
            r[i] = r.get(of).copied().unwrap_or(of);
        }
    }
    r
}

/// Whether step `s` writes its argument `a`. A step that declares no
/// writes is taken to write every argument that is not a weight.
fn writes(s: &Step, a: usize, buffers: &[Buffer]) -> bool {
    if s.writes.is_empty() {
        !matches!(buffers[s.args[a]].kind, BufferKind::Weight(_))
    } else {
        s.writes.contains(&a)
    }
}

/// The bytes `[lo, hi)` of its root buffer each buffer occupies.
fn spans(buffers: &[Buffer]) -> Vec<(BufId, usize, usize)> {
    let mut sp: Vec<(BufId, usize, usize)> = Vec::with_capacity(buffers.len());
    for (i, b) in buffers.iter().enumerate() {
        let s = match b.kind {
            // Aliases refer only to earlier buffers, already resolved.
            BufferKind::Alias { of, offset } => match sp.get(of) {
                Some(&(r, lo, _)) => (r, lo + offset, lo + offset + b.bytes),
                None => (of, offset, offset + b.bytes),
            },
            _ => (i, 0, b.bytes),
        };
        sp.push(s);
    }
    sp
}

/// The wave index of every step (see the module docs). Accesses conflict
/// when they touch overlapping bytes of one root buffer, so steps writing
/// disjoint slices of a buffer (the parts of a Concat built in place) do
/// not depend on each other.
pub(crate) fn levels(steps: &[Step], buffers: &[Buffer]) -> Vec<usize> {
    let span = spans(buffers);
    let n = steps.len();
    // Per root buffer: the accesses so far as (step, lo, hi, writes).
    let mut seen: Vec<Vec<(usize, usize, usize, bool)>> = vec![Vec::new(); buffers.len()];
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (j, s) in steps.iter().enumerate() {
        let mut deps = Vec::new();
        let mut mine = Vec::new();
        for (a, &b) in s.args.iter().enumerate() {
            let (r, lo, hi) = span[b];
            if matches!(buffers[r].kind, BufferKind::Weight(_)) {
                continue;
            }
            let w = writes(s, a, buffers);
            deps.extend(
                seen[r]
                    .iter()
                    .filter(|&&(i, l, h, wi)| i != j && (w || wi) && l < hi && lo < h)
                    .map(|&(i, ..)| i),
            );
            mine.push((r, (j, lo, hi, w)));
        }
        for (r, acc) in mine {
            seen[r].push(acc);
        }
        deps.sort_unstable();
        deps.dedup();
        preds[j] = deps;
    }
    let mut level = vec![0usize; n];
    for j in 0..n {
        level[j] = preds[j].iter().map(|&i| level[i] + 1).max().unwrap_or(0);
    }
    // Steps without predecessors: as late as their first consumer allows.
    let mut first_consumer = vec![usize::MAX; n];
    for j in 0..n {
        for &i in &preds[j] {
            first_consumer[i] = first_consumer[i].min(level[j]);
        }
    }
    for j in 0..n {
        if preds[j].is_empty() && first_consumer[j] != usize::MAX {
            level[j] = first_consumer[j].saturating_sub(1);
        }
    }
    level
}

/// Hand-off cost of one extra task of a split kernel, in the step's work
/// units (module docs, "Splitting one kernel"): ~100 µs (waking a sleeping
/// pool worker) at the ~2.5 units per ns of the generated non-GEMM loops.
pub const KERNEL_TASK_OVERHEAD: u64 = 250_000;

/// Least work per task of a split kernel: four times its hand-off cost,
/// so the overhead stays under a quarter of each task's work.
pub const KERNEL_TASK_MIN_WORK: u64 = 4 * KERNEL_TASK_OVERHEAD;

/// Hand-off cost of one extra task when the workers spin between tasks
/// (`Executable::set_spinning`, the default): claiming a task is a cache
/// line transfer plus the spread in finishing times, budgeted at ~2 µs,
/// fifty times less than waking a sleeping worker. (Budgeted at 10 µs,
/// SqueezeNet's 169k-unit global average pool stayed one task at 38 µs;
/// as two it takes 15.)
pub const KERNEL_TASK_OVERHEAD_SPIN: u64 = 5_000;

/// The hand-off cost of one extra task, [`KERNEL_TASK_OVERHEAD_SPIN`]
/// with spinning workers, else [`KERNEL_TASK_OVERHEAD`].
pub fn task_overhead(spinning: bool) -> u64 {
    if spinning {
        KERNEL_TASK_OVERHEAD_SPIN
    } else {
        KERNEL_TASK_OVERHEAD
    }
}

/// Whether kernels that can split across tasks do (with more than one
/// thread; steps of concurrent waves never split).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelSplit {
    /// The W-D rule decides per step ([`kernel_tasks`]; the default).
    #[default]
    Auto,
    /// Every splittable step runs as `min(threads, extent)` tasks, however
    /// little work it has (for tests and measurements).
    Always,
    /// No kernel splits (only GEMMs do, inside `dnnc_sgemm`).
    Never,
}

/// How many tasks step `s` runs as on `threads` threads when it runs
/// alone, with sleeping workers: `min(threads, E, W / KERNEL_TASK_MIN_WORK)`
/// (`E` the largest extent of its phases), at least 1; always 1 for
/// kernels that cannot split or contain splittable GEMMs.
pub fn kernel_tasks(s: &Step, threads: usize) -> usize {
    kernel_tasks_with(s, threads, KernelSplit::Auto, KERNEL_TASK_OVERHEAD)
}

/// [`kernel_tasks`] under `policy` with hand-off cost `overhead`
/// ([`task_overhead`]): each task carries at least `4 * overhead` work.
pub fn kernel_tasks_with(s: &Step, threads: usize, policy: KernelSplit, overhead: u64) -> usize {
    let extent = s.largest_extent();
    if threads <= 1 || extent <= 1 || s.split_work > 0 || policy == KernelSplit::Never {
        return 1;
    }
    let by_work = match policy {
        KernelSplit::Always => u64::MAX,
        _ => (s.work / (4 * overhead).max(1)).max(1),
    };
    (threads as u64).min(extent as u64).min(by_work) as usize
}

/// The estimates the partition decisions compare: for each step, its
/// time when it runs alone as `q` shares. The runtime's own
/// [`WorkDepthRule`] is the default; a compiler that knows the machine
/// supplies a calibrated model instead (`Executable::set_cost_model`), and
/// every decision of this module (tasks per kernel, threads per GEMM,
/// concurrent waves) then comes from it.
pub trait CostModel: Send + Sync + std::fmt::Debug {
    /// Where the estimates come from, for reports (`dnnc ir --after
    /// partition`).
    fn source(&self) -> String;
    /// The unit [`CostModel::time`] counts in, for reports.
    fn unit(&self) -> &'static str;
    /// Estimated time of step `j` (`s`) running alone as `q` shares: `q`
    /// tasks of a kernel that splits ([`Step::split`], its phases'
    /// extents), or its GEMMs split over `q` threads when it has GEMM work
    /// ([`Step::split_work`]); `q = 1` is the whole step on one thread.
    fn time(&self, j: usize, s: &Step, q: usize) -> f64;
    /// The cost of handing one step of a concurrent wave to another
    /// thread, in the same unit.
    fn handoff(&self) -> f64;
    /// The least relative gain a departure from the plain plan (each step
    /// whole, one after another in compile order) must promise before it
    /// is taken, a split or a concurrent wave: a model with a known
    /// prediction error does not trade the baseline for a gain smaller
    /// than that error. 0 by default.
    fn margin(&self) -> f64 {
        0.0
    }
    /// Estimated time of step `j` in a concurrent wave on `q` threads:
    /// [`CostModel::time`] plus whatever running apart from the other
    /// threads costs it (by default nothing).
    fn wave_time(&self, j: usize, s: &Step, q: usize) -> f64 {
        self.time(j, s, q)
    }
    /// Tasks step `j` runs as when alone on `threads` threads: the count
    /// in `1..=min(threads, E)` of least estimated time, more than one
    /// only when that beats the whole step by the margin (`E` the largest
    /// extent of its phases); 1 for a step that cannot split or does its
    /// work in splittable GEMMs.
    fn tasks(&self, j: usize, s: &Step, threads: usize) -> usize {
        let extent = s.largest_extent();
        if threads <= 1 || extent <= 1 || s.split_work > 0 {
            return 1;
        }
        least_time(self, j, s, threads.min(extent))
    }
    /// Threads the GEMMs of step `j` may split over when it runs alone on
    /// `threads` threads: the count in `1..=threads` of least estimated
    /// time (beating one thread by the margin) for a step with GEMM work;
    /// `threads` for any other step.
    fn gemm_threads(&self, j: usize, s: &Step, threads: usize) -> usize {
        if threads <= 1 || s.split_work == 0 {
            return threads.max(1);
        }
        least_time(self, j, s, threads)
    }
}

/// The share count in `1..=max` of least [`CostModel::time`] (the fewest
/// on ties), where a split counts only if it promises more than the
/// model's [`CostModel::margin`] over the whole step.
fn least_time<M: CostModel + ?Sized>(m: &M, j: usize, s: &Step, max: usize) -> usize {
    let whole = m.time(j, s, 1);
    let mut best = (1, whole * (1.0 - m.margin()));
    for q in 2..=max.max(1) {
        let t = m.time(j, s, q);
        if t < best.1 {
            best = (q, t);
        }
    }
    best.0
}

/// The runtime's Work-Depth rule (module docs) as a [`CostModel`], in
/// MAC-equivalent work units: what an executable decides with when no
/// calibrated model was given, or when its workers sleep between tasks.
#[derive(Clone, Copy, Debug)]
pub struct WorkDepthRule {
    /// Hand-off cost of a split kernel's extra task ([`task_overhead`]).
    pub overhead: u64,
}

impl CostModel for WorkDepthRule {
    fn source(&self) -> String {
        "the runtime's Work-Depth rule".into()
    }

    fn unit(&self) -> &'static str {
        "Work-Depth units"
    }

    fn time(&self, _j: usize, st: &Step, q: usize) -> f64 {
        let tasks = kernel_tasks_with(st, q, KernelSplit::Auto, self.overhead).min(q) as u64;
        if tasks > 1 {
            return (st.work / tasks + self.overhead * (tasks - 1)) as f64;
        }
        step_time(st.work, st.split_work, q) as f64
    }

    fn handoff(&self) -> f64 {
        TASK_OVERHEAD_MACS as f64
    }

    fn tasks(&self, _j: usize, s: &Step, threads: usize) -> usize {
        kernel_tasks_with(s, threads, KernelSplit::Auto, self.overhead)
    }

    fn gemm_threads(&self, _j: usize, _s: &Step, threads: usize) -> usize {
        threads.max(1)
    }
}

/// Tasks step `j` runs as alone on `threads` threads under `model` and
/// `policy` ([`KernelSplit::Always`] and `Never` override the model).
pub fn planned_tasks(
    model: &dyn CostModel,
    j: usize,
    s: &Step,
    threads: usize,
    policy: KernelSplit,
) -> usize {
    match policy {
        KernelSplit::Auto => model.tasks(j, s, threads),
        _ => kernel_tasks_with(s, threads, policy, 0),
    }
}

/// W-D time of a step of work `w`, `s` of it splittable GEMM work, on `q`
/// threads (module docs).
fn step_time(w: u64, s: u64, q: usize) -> u64 {
    let s = s.min(w);
    let slices = if q <= 1 {
        1
    } else {
        (q as u64).min((s / (super::native::GEMM_SHARE_HANDOFFS * TASK_OVERHEAD_MACS)).max(1))
    };
    (w - s) + s / slices + TASK_OVERHEAD_MACS * (slices - 1)
}

/// Estimated time of step `j` with `q` threads available, as its planned
/// tasks or its GEMMs on their planned threads: running alone, or (with
/// `wave`) in a concurrent wave.
fn step_estimate(model: &dyn CostModel, j: usize, s: &Step, q: usize, wave: bool) -> f64 {
    let tasks = model.tasks(j, s, q);
    let q = if tasks > 1 {
        tasks
    } else if s.split_work > 0 {
        model.gemm_threads(j, s, q)
    } else {
        1
    };
    if wave {
        model.wave_time(j, s, q)
    } else {
        model.time(j, s, q)
    }
}

/// `(T_seq, T_conc, threads per step)` of running `steps` (index, step)
/// on `p` threads.
fn estimate(steps: &[(usize, &Step)], p: usize, model: &dyn CostModel) -> (f64, f64, usize) {
    let k = steps.len().max(1);
    let seq: f64 = steps
        .iter()
        .map(|&(j, s)| step_estimate(model, j, s, p, false))
        .sum();
    let q = (p / k).max(1);
    let workers = (p / q).max(1);
    let mut times: Vec<f64> = steps
        .iter()
        .map(|&(j, s)| step_estimate(model, j, s, q, true))
        .collect();
    times.sort_unstable_by(|a, b| b.total_cmp(a));
    let mut load = vec![0f64; workers];
    for t in times {
        if let Some(min) = load.iter_mut().min_by(|a, b| a.total_cmp(b)) {
            *min += t;
        }
    }
    let makespan = load.into_iter().fold(0f64, f64::max);
    let conc = makespan + model.handoff() * (k as f64 - 1.0);
    (seq, conc, q)
}

/// The waves of `steps` with the decision for `threads` threads under
/// `policy`, estimated by `model`, in execution order.
pub fn waves(
    steps: &[Step],
    buffers: &[Buffer],
    threads: usize,
    policy: Concurrency,
    model: &dyn CostModel,
) -> Vec<Wave> {
    let level = levels(steps, buffers);
    let count = level.iter().map(|&l| l + 1).max().unwrap_or(0);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (j, &l) in level.iter().enumerate() {
        members[l].push(j);
    }
    members
        .into_iter()
        .filter(|m| !m.is_empty())
        .map(|m| {
            let ss: Vec<(usize, &Step)> = m.iter().map(|&j| (j, &steps[j])).collect();
            let (seq, conc, q) = estimate(&ss, threads, model);
            let concurrent = threads > 1
                && m.len() > 1
                && match policy {
                    Concurrency::Auto => conc < seq * (1.0 - model.margin()),
                    Concurrency::Always => true,
                    Concurrency::Never => false,
                };
            Wave {
                steps: m,
                concurrent,
                threads_per_step: if concurrent { q } else { threads.max(1) },
                est_sequential: seq,
                est_concurrent: conc,
            }
        })
        .collect()
}

/// The order steps actually run in: the waves when any of them is
/// concurrent, else every step alone in compile order (so a run without
/// concurrency places memory exactly as with one thread).
pub(crate) fn execution_order(steps: usize, waves: &[Wave], threads: usize) -> Vec<Wave> {
    if waves.iter().any(|w| w.concurrent) {
        return waves.to_vec();
    }
    (0..steps)
        .map(|j| Wave {
            steps: vec![j],
            concurrent: false,
            threads_per_step: threads.max(1),
            est_sequential: 0.0,
            est_concurrent: 0.0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A no-op step with work `w`, split extent `split` and splittable
    /// GEMM work `s`, for the cost-rule tests.
    fn test_step(w: u64, split: usize, s: u64) -> Step {
        Step {
            name: String::new(),
            op: String::new(),
            func: crate::cpu::tests::nop,
            args: Vec::new(),
            errors: Vec::new(),
            nodes: Vec::new(),
            algo: None,
            inplace: Vec::new(),
            writes: Vec::new(),
            work: w,
            split_work: s,
            split,
            phase_splits: Vec::new(),
            split_units: Vec::new(),
            task_ws: Vec::new(),
        }
    }

    #[test]
    fn small_work_stays_sequential_large_independent_work_runs_concurrently() {
        let o = TASK_OVERHEAD_MACS;
        let step = |w: u64, s: u64| test_step(w, 1, s);
        let rule = WorkDepthRule {
            overhead: KERNEL_TASK_OVERHEAD,
        };
        let estimate = |a: &Step, b: &Step, p| estimate(&[(0, a), (1, b)], p, &rule);
        // Tiny steps: the hand-off overhead dominates.
        let (a, b) = (step(1000, 0), step(1000, 0));
        let (seq, conc, _) = estimate(&a, &b, 2);
        assert!(conc >= seq);
        // Unsplittable large steps: concurrency halves the time.
        let (a, b) = (step(100 * o, 0), step(100 * o, 0));
        let (seq, conc, q) = estimate(&a, &b, 2);
        assert!(conc < seq && q == 1, "{seq} {conc}");
        // A large splittable GEMM next to a small step: splitting the GEMM
        // beats running the two side by side.
        let (a, b) = (step(200 * o, 200 * o), step(o, 0));
        let (seq, conc, _) = estimate(&a, &b, 2);
        assert!(conc >= seq, "{seq} {conc}");
    }

    #[test]
    fn kernels_split_only_when_each_task_carries_enough_work() {
        let m = KERNEL_TASK_MIN_WORK;
        assert_eq!(kernel_tasks(&test_step(100 * m, 64, 0), 1), 1);
        assert_eq!(kernel_tasks(&test_step(100 * m, 64, 0), 2), 2);
        assert_eq!(kernel_tasks(&test_step(100 * m, 3, 0), 8), 3);
        assert_eq!(kernel_tasks(&test_step(3 * m, 64, 0), 8), 3);
        assert_eq!(kernel_tasks(&test_step(m / 2, 64, 0), 2), 1);
        assert_eq!(kernel_tasks(&test_step(100 * m, 1, 0), 2), 1);
        // GEMM kernels split their GEMMs instead.
        assert_eq!(kernel_tasks(&test_step(100 * m, 64, m), 2), 1);
    }

    #[test]
    fn spinning_workers_split_smaller_kernels_and_phases_use_their_largest_extent() {
        let (spin, sleep) = (task_overhead(true), task_overhead(false));
        assert!(spin < sleep);
        let s = test_step(8 * spin, 64, 0);
        let auto = KernelSplit::Auto;
        assert_eq!(kernel_tasks_with(&s, 2, auto, spin), 2);
        assert_eq!(kernel_tasks_with(&s, 2, auto, sleep), 1);
        // Phase 0 has one unit, a later phase 64: the step splits.
        let mut p = test_step(100 * KERNEL_TASK_MIN_WORK, 1, 0);
        assert_eq!(kernel_tasks(&p, 2), 1);
        p.phase_splits = vec![1, 64];
        assert_eq!(kernel_tasks(&p, 2), 2);
    }

    /// A model with fixed per-step times: `t1[j]` on one share, divided
    /// perfectly, plus `handoff` per extra share.
    #[derive(Debug)]
    struct Fixed {
        t1: Vec<f64>,
        handoff: f64,
        margin: f64,
    }

    impl CostModel for Fixed {
        fn source(&self) -> String {
            "a test model".into()
        }
        fn unit(&self) -> &'static str {
            "s"
        }
        fn time(&self, j: usize, _s: &Step, q: usize) -> f64 {
            self.t1[j] / q as f64 + self.handoff * (q - 1) as f64
        }
        fn handoff(&self) -> f64 {
            self.handoff
        }
        fn margin(&self) -> f64 {
            self.margin
        }
    }

    #[test]
    fn a_supplied_cost_model_decides_tasks_gemm_threads_and_waves() {
        let loop_step = test_step(1, 64, 0);
        let gemm_step = test_step(1, 1, 1);
        // Splitting pays, most as 3 shares: 10 / 3 + 2 = 5.3 against 6
        // for 2 and 5.5 for 4.
        let cheap = Fixed {
            t1: vec![10.0, 10.0],
            handoff: 1.0,
            margin: 0.0,
        };
        assert_eq!(
            planned_tasks(&cheap, 0, &loop_step, 4, KernelSplit::Auto),
            3
        );
        assert_eq!(cheap.gemm_threads(1, &gemm_step, 4), 3);
        // It does not: 10 / 2 + 8 > 10. The work counts (1 unit) play no
        // part either way.
        let dear = Fixed {
            t1: vec![10.0, 10.0],
            handoff: 8.0,
            margin: 0.0,
        };
        assert_eq!(planned_tasks(&dear, 0, &loop_step, 4, KernelSplit::Auto), 1);
        assert_eq!(dear.gemm_threads(1, &gemm_step, 4), 1);
        // The policies still override the model.
        assert_eq!(
            planned_tasks(&dear, 0, &loop_step, 4, KernelSplit::Always),
            4
        );
        assert_eq!(
            planned_tasks(&cheap, 0, &loop_step, 4, KernelSplit::Never),
            1
        );
        // Two unsplittable steps of 10 on 2 threads: 20 one after another,
        // 10 + 1 side by side; with a 50% margin the 45% gain is not
        // enough.
        let a = test_step(1, 1, 0);
        let b = test_step(1, 1, 0);
        let (seq, conc, q) = estimate(&[(0, &a), (1, &b)], 2, &cheap);
        assert_eq!((seq, conc, q), (20.0, 11.0, 1));
        let buffers: Vec<Buffer> = Vec::new();
        let w = waves(
            &[a.clone(), b.clone()],
            &buffers,
            2,
            Concurrency::Auto,
            &cheap,
        );
        assert!(w.len() == 1 && w[0].concurrent, "{w:?}");
        let unsure = Fixed {
            margin: 0.5,
            ..cheap
        };
        let w = waves(&[a, b], &buffers, 2, Concurrency::Auto, &unsure);
        assert!(w.len() == 1 && !w[0].concurrent, "{w:?}");
    }
}
