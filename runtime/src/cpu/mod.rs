//! The compiled CPU executable: natively generated kernels run in order over
//! flat buffers.
//!
//! The code generator (in `dnnc-compiler`) produces one native function per
//! kernel; this module owns what it takes to *run* them and nothing about
//! how they were made, so the runtime keeps depending only on `dnnc-ir`.
//!
//! # Kernel ABI
//!
//! Every kernel is
//! `unsafe extern "C" fn(args: *const *mut u8, task: usize, tasks: usize, phase: usize) -> i32`.
//! `args` points to one pointer per buffer the kernel touches, in the order
//! of [`Step::args`]; each buffer is the dense row-major data of one value
//! (f32 as 4 bytes, i64 as 8, bool as 1), or a workspace. The return value
//! is 0 on success, or `k >= 1` to report [`Step::errors`]`[k - 1]` (e.g. a
//! gather index out of range) — generated code never panics or aborts.
//!
//! `(task, tasks)` with `task < tasks` asks for one share of the work: a
//! kernel whose [`Step::split`] is `E > 1` computes only the units
//! `[E * task / tasks, E * (task + 1) / tasks)` of its outermost independent
//! loop (planes of a pool or depthwise conv, rows of an elementwise domain,
//! kept outer indices of a reduction or softmax), and `(0, 1)` is the whole
//! kernel. Units are disjoint sets of output elements, each computed by the
//! same code whatever the split, so any `tasks` gives bitwise the result
//! of `(0, 1)`; the runtime calls the `tasks` shares of one step
//! concurrently, so shares must not write anything another share reads or
//! writes. A kernel with `split == 1` ignores the pair and is only ever
//! called with `(0, 1)`. Workspaces are shared by all tasks of a call, so a
//! kernel that keeps scratch in a workspace either gives each task its own
//! slice (`task_slice_stride(size)` times the largest `tasks`, the slice of
//! task `t` at `t * task_slice_stride(size)`, so every slice starts on a
//! cache line) or does not split; scratch on the kernel's own stack frame
//! is per call and free.
//! A kernel that calls `dnnc_sgemm` keeps `split == 1` (its GEMMs split
//! themselves) unless it accepts that inside a task they run on one thread
//! (the runtime runs every task under `native::with_threads(1, ..)`).
//! A workspace listed in [`Step::task_ws`] is sized by the runtime for
//! the step's planned task count: task `t` of `T` owns bytes
//! `[t * S, (t + 1) * S)` of it, `S` the buffer's declared size.
//!
//! # Phases
//!
//! A kernel may consist of `P > 1` *phases* with a barrier between them
//! ([`Step::phase_splits`]), for work whose stages split over different
//! axes (Winograd: input channels, then frequency GEMMs, then output
//! channels). The runtime calls phase `p` (the `phase` argument) as
//! `T_p = min(T, E_p)` tasks, `E_p` that phase's extent and `T` the step's
//! task count, and starts phase `p + 1` only after every task of phase
//! `p` returned 0. A phase of extent 1 runs as one call with the step's
//! thread budget, so a GEMM in it splits itself. Single-phase kernels are
//! only ever called with `phase == 0`.
//!
//! Buffers are 64-byte aligned. An executable is immutable after
//! compilation, so one instance may run on many threads at once: every run
//! gets its own activation memory, and weights are only read.
//!
//! # What a run costs
//!
//! Everything that does not depend on the input data is computed once, in
//! [`Executable::new`] and [`Executable::set_threads`]: the [`schedule`]
//! (waves of independent steps and whether each runs concurrently), the
//! arena plan, and every kernel's argument pointers as arena offsets or
//! weight addresses. Each cached run state holds an arena with those
//! pointers already resolved against it, so a run validates the inputs,
//! points the arguments that read them at the caller's tensors (copying
//! into the arena only an input whose elements are not contiguous: no
//! kernel writes a graph input, and no other buffer is planned over one),
//! calls the kernels through the prepared pointer arrays and copies the
//! outputs out — no hashing, no planning and no allocation besides the
//! output tensors. Reading a 224x224 image in place saves copying its
//! 0.6 MB each run.
//!
//! # Concurrency
//!
//! With several threads, a wave of independent steps runs concurrently
//! on the pool when the Work-Depth rule in [`schedule`] says it is cheaper
//! than running the steps one after another with their GEMMs split; the
//! memory plan then treats every buffer of that wave as live for the whole
//! wave, so concurrent kernels never share memory.

mod alloc;
pub mod blocked;
pub mod blocked_pool;
pub mod dw8;
pub mod dwrow;
pub mod fftconv;
pub mod group8;
pub mod maxpool;
pub mod native;
pub mod peak;
pub mod pgemm;
mod plan;
pub mod reblock;
pub mod schedule;
pub mod spin;
pub mod wino;

pub use alloc::{AlignedBuf, Allocator, ArenaPlan, PerValueAllocator, TempInfo, ALIGN, HUGE_PAGE};
pub use plan::GreedyPlanner;
pub use schedule::{Concurrency, CostModel, KernelSplit, Wave, WorkDepthRule};

use crate::RunError;
use dnnc_ir::{DType, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};
use std::any::Any;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

/// A generated kernel: reads and writes the buffers whose pointers `args`
/// lists, returns 0 or a 1-based error index (see the module docs).
pub type KernelFn =
    unsafe extern "C" fn(args: *const *mut u8, task: usize, tasks: usize, phase: usize) -> i32;

/// Per-step profile entries: kernel name, op(s), wall time.
pub type StepTimes = Vec<(String, String, std::time::Duration)>;

/// Index of a buffer in [`Executable::buffers`].
pub type BufId = usize;

/// Where a buffer's memory comes from.
#[derive(Debug)]
pub enum BufferKind {
    /// A graph input: read in place from the caller's tensor when its
    /// elements are contiguous, else copied into the arena, each run.
    Input {
        /// The input's name.
        name: String,
    },
    /// Weight data prepared at compile time and owned by the executable
    /// (read-only while running).
    Weight(AlignedBuf),
    /// Activation or workspace memory, placed by the [`Allocator`].
    Temp,
    /// The same memory as another (earlier) buffer at a byte offset: views
    /// such as Reshape cost no copy.
    Alias {
        /// The buffer aliased.
        of: BufId,
        /// Byte offset into it.
        offset: usize,
    },
}

/// One buffer of the executable.
#[derive(Debug)]
pub struct Buffer {
    /// Value name (or a workspace label) for messages.
    pub name: String,
    /// Size in bytes.
    pub bytes: usize,
    /// Where the memory comes from.
    pub kind: BufferKind,
}

/// One kernel call.
#[derive(Clone, Debug)]
pub struct Step {
    /// Kernel name (its anchor node's name), for messages and profiles.
    pub name: String,
    /// The op (or ops, `+`-joined) it implements, for messages.
    pub op: String,
    /// The generated function.
    pub func: KernelFn,
    /// Buffers passed, in the order the function expects them.
    pub args: Vec<BufId>,
    /// Messages for the non-zero return codes, 1-based.
    pub errors: Vec<String>,
    /// Names of the graph nodes fused into this kernel, in order (for
    /// profiles).
    pub nodes: Vec<String>,
    /// The convolution algorithm, for conv kernels (for profiles).
    pub algo: Option<String>,
    /// `(input arg, output arg)` index pairs the kernel allows to share
    /// memory: it reads each element of the input before writing the same
    /// element of the output and reads the input nowhere else, so a
    /// planner may place the output over an input that dies here.
    pub inplace: Vec<(usize, usize)>,
    /// Argument indices the kernel writes (its outputs and workspaces);
    /// every other argument is only read. The scheduler orders steps by
    /// these; empty means "every argument that is not a weight".
    pub writes: Vec<usize>,
    /// Work-Depth work `W` of the kernel (sum over its fused nodes, one op
    /// per multiply-accumulate or element), for the concurrency decision.
    pub work: u64,
    /// The part of `work` done by GEMM calls large enough for
    /// `dnnc_sgemm` to split across threads (see [`native::gemm_tasks`]).
    pub split_work: u64,
    /// Split extent `E`: how many independent units the kernel's outermost
    /// loop has when called as one of several tasks (module docs, "Kernel
    /// ABI"); 1 = the kernel cannot split. The runtime picks the task
    /// count with [`schedule::kernel_tasks`]. For a phased kernel this is
    /// phase 0's extent.
    pub split: usize,
    /// Split extents of phases `1..P` of a phased kernel (module docs,
    /// "Phases"); empty for a single-phase kernel.
    pub phase_splits: Vec<usize>,
    /// What the units of `split` and of each of `phase_splits` are
    /// (`output planes`, `bands of output rows`, ...), in that order;
    /// empty for a kernel that does not split. For the partition `dnnc ir
    /// --after partition` shows.
    pub split_units: Vec<String>,
    /// Argument indices of workspaces the runtime sizes per task (module
    /// docs, "Kernel ABI"): the declared size times the planned tasks.
    pub task_ws: Vec<usize>,
}

impl Step {
    /// The largest extent over its phases (`split` and `phase_splits`):
    /// the most tasks any phase of it can use.
    pub fn largest_extent(&self) -> usize {
        self.phase_splits.iter().fold(self.split, |a, &b| a.max(b))
    }
}

/// Whether this machine runs the AVX-512 paths of the channel-blocked
/// kernels (`blocked`'s zmm tiles, `dwrow`'s rows with 32 registers):
/// AVX2+FMA plus AVX-512F and VL (8-lane EVEX instructions); false off
/// x86-64.
pub fn avx512_vl() -> bool {
    dnnc_ir::isa::avx512_vl()
}

/// Whether this machine runs the AVX2+FMA paths of the native conv
/// kernels (`blocked`, `group8`, `dw8`): false off x86-64.
pub fn avx2_fma() -> bool {
    dnnc_ir::isa::cpu_isa() >= dnnc_ir::isa::CpuIsa::Avx2
}

/// Bytes of one core's L2 cache, which decides whether a blocked
/// pointwise conv's filter stays in cache between pixel chunks
/// ([`blocked::big_filter_floats`]): read once from Linux's sysfs
/// (`cpu0`'s level-2 data or unified cache), else 1 MiB, the Xeon class
/// the kernels were first tuned on. Zen 3 has 512 KiB.
pub fn l2_bytes() -> usize {
    static L2: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *L2.get_or_init(|| sysfs_l2_bytes().unwrap_or(1 << 20))
}

/// The L2 size sysfs reports for `cpu0`, if it does.
fn sysfs_l2_bytes() -> Option<usize> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8).find_map(|i| {
        let dir = base.join(format!("index{i}"));
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
        let level = read("level")?;
        let kind = read("type")?;
        if level.trim() != "2" || kind.trim() == "Instruction" {
            return None;
        }
        parse_cache_size(read("size")?.trim())
    })
}

/// A sysfs cache size (`512K`, `1M`, or bytes) in bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    (n > 0).then_some(n * scale)
}

/// `n` deterministic floats in `[-1, 1)` from `seed`, for the native
/// kernels' unit tests.
#[cfg(test)]
pub(crate) fn test_data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 8e6 - 1.0)
        .collect()
}

/// Bytes from one task's slice of a per-task workspace (`Step::task_ws`)
/// to the next: the declared size rounded up to whole cache lines. With
/// the slices packed at the declared size, a ResNet-18 stem task's im2col
/// columns started 16 bytes into a line, and its GEMM, loading B rows as
/// 64-byte vectors, ran 11% slower than the other task's.
pub fn task_slice_stride(bytes: usize) -> usize {
    bytes.next_multiple_of(64)
}

/// A graph output: which buffer holds it and its type.
#[derive(Clone, Debug)]
pub struct OutputSpec {
    /// Value name.
    pub name: String,
    /// Buffer holding it after the last step.
    pub buf: BufId,
    /// Its type.
    pub ty: TensorType,
}

/// A graph compiled to native code: compile once, run many times, from any
/// number of threads.
///
/// Built by [`Executable::new`], which computes everything a run needs
/// that does not depend on the input data — the schedule, the arena plan
/// and every kernel's argument pointers relative to the arena — so a run
/// only binds the inputs (in place, or copied when strided), calls the
/// kernels and copies the outputs out.
/// The parts are read through accessors because the cached plan must stay
/// consistent with them.
pub struct Executable {
    graph: String,
    inputs: Vec<(String, TensorType, BufId)>,
    outputs: Vec<OutputSpec>,
    buffers: Vec<Buffer>,
    steps: Vec<Step>,
    /// Keeps the generated code alive (e.g. the JIT module).
    _code: Arc<dyn Any + Send + Sync>,
    allocator: Box<dyn Allocator>,
    parallel: Parallel,
    concurrency: Concurrency,
    kernel_split: KernelSplit,
    /// The calibrated model the partition decisions come from, when the
    /// compiler gave one ([`Executable::set_cost_model`]).
    cost: Option<Arc<dyn CostModel>>,
    /// Split work goes to hot polling workers ([`Executable::set_spinning`]).
    spinning: bool,
    prepared: Prepared,
    /// Per-run state of finished runs (arena and resolved argument
    /// pointers), reused so repeated runs neither allocate nor page-fault
    /// (kernels write every temp before reading it, so stale contents are
    /// harmless). Concurrent runs each take their own.
    states: std::sync::Mutex<Vec<RunState>>,
    /// The byte fresh arenas are filled with instead of zeros
    /// ([`Executable::set_arena_fill`]).
    arena_fill: Option<u8>,
}

/// The executable's worker threads: a persistent rayon pool, so runs do not
/// spawn threads, plus a [`spin::SpinPool`] whose workers stay hot during
/// a run, so a split's hand-off does not pay a ~100-200 µs wake-up.
#[derive(Debug, Default)]
pub struct Parallel {
    pool: Option<rayon::ThreadPool>,
    spin: Option<spin::SpinPool>,
}

impl Parallel {
    /// Threads a run uses (1 when no pool is set).
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }
}

/// Activation memory of an executable, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// The arena the allocator plans: peak activation bytes per run.
    pub planned: usize,
    /// Every temp in its own buffer (no reuse).
    pub naive: usize,
    /// The most bytes live at one step: no placement can use less.
    pub lower_bound: usize,
    /// Temps that took over a dying input's memory in place.
    pub in_place: usize,
}

/// Where a buffer's memory is, independent of any one run.
#[derive(Clone, Copy, Debug)]
enum Loc {
    /// At this byte offset in the run's arena.
    Arena(usize),
    /// At this fixed address (weights owned by the executable).
    Fixed(usize),
    /// Nowhere (a buffer no plan placed; never passed to a kernel).
    Null,
}

/// Everything a run needs that depends only on the executable and its
/// thread count: computed once by [`Executable::new`] and
/// [`Executable::set_threads`].
#[derive(Debug, Default)]
struct Prepared {
    /// Nothing in the plan splits across threads, so runs stay on the
    /// caller's thread.
    serial: bool,
    /// Waves with the W-D decision, for reports.
    waves: Vec<Wave>,
    /// What runs, in order (see `schedule::execution_order`).
    exec: Vec<Wave>,
    memory: MemoryReport,
    /// Bytes per arena: the temps, then the graph inputs.
    arena_bytes: usize,
    /// Location of every buffer.
    loc: Vec<Loc>,
    /// Arguments of step `j` are `args[arg_start[j]..arg_start[j + 1]]`.
    arg_start: Vec<usize>,
    args: Vec<Loc>,
    /// Arena offset of each graph input, in declaration order.
    input_offsets: Vec<usize>,
    /// `(argument index, graph input, byte offset)` of every step argument
    /// inside a graph input (the input or a view of it), patched each run
    /// to wherever that input is read from (see `Executable::run`).
    input_args: Vec<(usize, usize, usize)>,
    /// For each buffer inside a graph input: that input and the byte
    /// offset (outputs that are views of an input are read from it).
    origin: Vec<Option<(usize, usize)>>,
    /// Tasks each step runs as (1 inside concurrent waves; see
    /// [`CostModel::tasks`]).
    tasks: Vec<usize>,
    /// Threads each sequentially run step's GEMMs may split over (see
    /// [`CostModel::gemm_threads`]; concurrent waves give theirs).
    gemm_threads: Vec<usize>,
}

/// One run's memory: the arena and the argument pointers resolved against
/// it (so a reused state needs no pointer arithmetic at all), plus slots
/// for the return codes and times of concurrently run steps.
struct RunState {
    arena: AlignedBuf,
    args: Vec<*mut u8>,
    /// Where each graph input is read this run (kept for reuse).
    inputs_at: Vec<*const u8>,
    rcs: Vec<AtomicI32>,
    nanos: Vec<AtomicU64>,
}

// SAFETY: the pointers address the state's own arena and the executable's
// weights, and during a run the caller's input tensors (re-bound at the
// start of every run, never followed after it); a state is used by one
// run at a time (it is taken out of the cache for the run), and the
// executable outlives it.
unsafe impl Send for RunState {}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executable")
            .field("graph", &self.graph)
            .field("buffers", &self.buffers.len())
            .field("steps", &self.steps.len())
            .finish()
    }
}

impl Executable {
    /// Assembles an executable from the code generator's parts and plans
    /// its runs (one thread; see [`Executable::set_threads`]).
    ///
    /// `inputs` are the graph inputs in declaration order with their
    /// buffers, `buffers` every buffer (aliases refer only to earlier
    /// ones), `steps` the kernel calls in a valid order, `code` whatever
    /// keeps the kernels' memory alive, `allocator` the arena placement.
    pub fn new(
        graph: String,
        inputs: Vec<(String, TensorType, BufId)>,
        outputs: Vec<OutputSpec>,
        buffers: Vec<Buffer>,
        steps: Vec<Step>,
        code: Arc<dyn Any + Send + Sync>,
        allocator: Box<dyn Allocator>,
    ) -> Executable {
        let mut e = Executable {
            graph,
            inputs,
            outputs,
            buffers,
            steps,
            _code: code,
            allocator,
            parallel: Parallel::default(),
            concurrency: Concurrency::Auto,
            kernel_split: KernelSplit::Auto,
            cost: None,
            spinning: true,
            prepared: Prepared::default(),
            states: Default::default(),
            arena_fill: None,
        };
        e.prepare();
        e
    }

    /// Graph name, for messages.
    pub fn graph_name(&self) -> &str {
        &self.graph
    }

    /// Graph inputs in declaration order: name, type, buffer.
    pub fn inputs(&self) -> &[(String, TensorType, BufId)] {
        &self.inputs
    }

    /// Graph outputs in order.
    pub fn outputs(&self) -> &[OutputSpec] {
        &self.outputs
    }

    /// Every buffer; aliases refer only to earlier ones.
    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    /// Kernel calls in compile order (the order one thread runs them in).
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Number of kernel calls per run.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Threads runs use ([`Executable::set_threads`]); 1 by default.
    pub fn threads(&self) -> usize {
        self.parallel.threads()
    }

    /// The waves of independent steps and, for the current thread count,
    /// whether each runs concurrently (see [`schedule`] for the rule).
    pub fn waves(&self) -> &[Wave] {
        &self.prepared.waves
    }

    /// The policy for concurrent waves ([`Executable::set_concurrency`]).
    pub fn concurrency(&self) -> Concurrency {
        self.concurrency
    }

    /// How many tasks each step runs as with the current thread count,
    /// indexed like [`Executable::steps`] (1 = the whole kernel on one
    /// thread; steps of a concurrent wave always 1).
    pub fn step_tasks(&self) -> &[usize] {
        &self.prepared.tasks
    }

    /// Threads each step's GEMMs may split over when it runs alone,
    /// indexed like [`Executable::steps`] (a step without GEMM work: the
    /// run's thread count, unused).
    pub fn step_gemm_threads(&self) -> &[usize] {
        &self.prepared.gemm_threads
    }

    /// Whether any wave runs its steps concurrently.
    pub fn has_concurrency(&self) -> bool {
        self.prepared.exec.iter().any(|w| w.concurrent)
    }

    /// Byte range in a run's arena of buffer `b`'s memory (a temp or an
    /// alias of one; `None` for inputs and weights), for checking the plan.
    pub fn arena_range(&self, b: BufId) -> Option<std::ops::Range<usize>> {
        let root = schedule::roots(&self.buffers)[b];
        if !matches!(self.buffers[root].kind, BufferKind::Temp) {
            return None;
        }
        match self.prepared.loc[b] {
            Loc::Arena(off) => Some(off..off + self.buffers[b].bytes),
            _ => None,
        }
    }

    /// Sets the number of threads runs use (a persistent pool of that many
    /// workers; 1 runs on the caller's thread) and re-plans: with several
    /// threads, waves of independent steps run concurrently where the W-D
    /// rule says it pays, and large GEMMs split. Results do not change.
    pub fn set_threads(&mut self, threads: usize) -> Result<(), String> {
        if threads == 0 {
            return Err("the thread count must be at least 1".into());
        }
        self.parallel.spin = None;
        self.parallel.pool = if threads == 1 {
            None
        } else {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("dnnc-worker-{i}"))
                    .build()
                    .map_err(|e| format!("cannot start {threads} threads: {e}"))?,
            )
        };
        self.set_spinning(self.spinning)
    }

    /// Whether runs keep `threads - 1` extra workers polling for split
    /// work ([`spin::SpinPool`]) instead of waking sleeping rayon workers;
    /// on by default with several threads. A hand-off to a hot worker
    /// costs ~1 µs instead of a ~100-200 µs wake-up (2-thread ResNet-18
    /// 20.0 -> 18.1 ms, MobileNet-V2 7.6 -> 6.2 ms on the quiet 2-vCPU
    /// development machine). Turn it off on an oversubscribed machine: a
    /// split then waits for a descheduled worker (measured there 25 -> 43
    /// ms). Workers poll at most 300 µs after their last task, yielding
    /// while they poll. Results do not change. [`Executable::set_threads`]
    /// keeps the setting.
    pub fn set_spinning(&mut self, on: bool) -> Result<(), String> {
        self.spinning = on;
        let threads = self.parallel.threads();
        self.parallel.spin = if on && threads > 1 {
            Some(spin::SpinPool::new(threads - 1)?)
        } else {
            None
        };
        // Splits pay from less work with hot workers: re-plan.
        self.prepare();
        Ok(())
    }

    /// Fills every later run's arena (activations and workspaces) with
    /// `byte` before the run instead of zeros (`None`: zeros), dropping
    /// the cached run states. Kernels write every temp before they read
    /// it, so results must not change: with `0xFF` (every float a NaN) a
    /// test shows that no kernel reads memory nobody wrote, as a ring
    /// whose padding a kernel forgot to clear would.
    pub fn set_arena_fill(&mut self, byte: Option<u8>) {
        self.arena_fill = byte;
        if let Ok(mut states) = self.states.lock() {
            states.clear();
        }
    }

    /// Whether split work goes to hot polling workers
    /// ([`Executable::set_spinning`]).
    pub fn spinning(&self) -> bool {
        self.spinning
    }

    /// Whether runs stay on the caller's thread because nothing in the
    /// plan splits (no concurrent wave, no split kernel, no kernel large
    /// enough for its GEMMs to split): then the pool's hand-off would only
    /// add latency (LeNet-5 on 2 threads).
    pub fn runs_on_caller(&self) -> bool {
        self.parallel.pool.is_none() || self.prepared.serial
    }

    /// The hand-off cost of a split kernel's extra task the plan assumes
    /// ([`schedule::task_overhead`]): small with spinning workers.
    pub fn task_overhead(&self) -> u64 {
        schedule::task_overhead(self.parallel.spin.is_some())
    }

    /// Makes `model` decide the partition (tasks per kernel, threads per
    /// GEMM, concurrent waves) instead of the runtime's Work-Depth rule,
    /// and re-plans; `None` returns to the rule. The rule still decides
    /// while the workers sleep between tasks ([`Executable::set_spinning`]
    /// off): a calibrated model prices hand-offs to hot workers.
    pub fn set_cost_model(&mut self, model: Option<Arc<dyn CostModel>>) {
        self.cost = model;
        self.prepare();
    }

    /// The model the current plan was decided by: the calibrated one when
    /// set and the workers spin, else the runtime's Work-Depth rule.
    pub fn cost_model(&self) -> Arc<dyn CostModel> {
        match &self.cost {
            Some(m) if self.parallel.spin.is_some() => m.clone(),
            _ => Arc::new(WorkDepthRule {
                overhead: self.task_overhead(),
            }),
        }
    }

    /// Overrides the W-D decision on concurrent waves (tests and
    /// measurements) and re-plans.
    pub fn set_concurrency(&mut self, policy: Concurrency) {
        self.concurrency = policy;
        self.prepare();
    }

    /// Overrides the W-D decision on splitting kernels into tasks (tests
    /// and measurements); the plan is recomputed.
    pub fn set_kernel_split(&mut self, policy: KernelSplit) {
        self.kernel_split = policy;
        self.prepare();
    }

    /// Replaces the arena placement (e.g. [`PerValueAllocator`] as the
    /// no-reuse reference) and re-plans.
    pub fn set_allocator(&mut self, allocator: Box<dyn Allocator>) {
        self.allocator = allocator;
        self.prepare();
    }

    /// Peak activation bytes as planned by the executable's allocator for
    /// the current schedule, against one buffer per temp and the live-set
    /// lower bound. Graph inputs are not activations and are not counted.
    pub fn memory(&self) -> MemoryReport {
        self.prepared.memory
    }

    /// Computes the schedule, the arena plan and the argument locations.
    fn prepare(&mut self) {
        let threads = self.parallel.threads();
        let model = self.cost_model();
        let model = model.as_ref();
        let waves = schedule::waves(&self.steps, &self.buffers, threads, self.concurrency, model);
        let exec = schedule::execution_order(self.steps.len(), &waves, threads);
        let mut tasks: Vec<usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(j, s)| schedule::planned_tasks(model, j, s, threads, self.kernel_split))
            .collect();
        let mut gemm_threads: Vec<usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(j, s)| model.gemm_threads(j, s, threads).clamp(1, threads.max(1)))
            .collect();
        for w in exec.iter().filter(|w| w.concurrent) {
            for &j in &w.steps {
                tasks[j] = 1;
                gemm_threads[j] = w.threads_per_step;
            }
        }
        let temps = self.temp_infos(&exec, &tasks);
        let plan = self.allocator.plan(&temps);
        let iv = plan::intervals(&temps);
        let memory = MemoryReport {
            planned: plan.total_bytes,
            naive: dnnc_ir::memplan::naive_bytes(&iv, ALIGN),
            lower_bound: dnnc_ir::memplan::lower_bound(&iv, ALIGN),
            in_place: dnnc_ir::memplan::plan(&iv, ALIGN).in_place,
        };
        let mut arena_bytes = plan.total_bytes.div_ceil(ALIGN) * ALIGN;
        let mut input_offsets = Vec::with_capacity(self.inputs.len());
        let mut input_at = vec![None; self.buffers.len()];
        for (_, ty, b) in &self.inputs {
            input_offsets.push(arena_bytes);
            input_at[*b] = Some(arena_bytes);
            arena_bytes += ty.size_bytes().div_ceil(ALIGN) * ALIGN;
        }
        let mut temp_at = vec![None; self.buffers.len()];
        for (t, &off) in temps.iter().zip(&plan.offsets) {
            temp_at[t.buf] = Some(off);
        }
        let mut loc = Vec::with_capacity(self.buffers.len());
        let mut origin: Vec<Option<(usize, usize)>> = Vec::with_capacity(self.buffers.len());
        for (i, b) in self.buffers.iter().enumerate() {
            origin.push(match &b.kind {
                BufferKind::Input { .. } => self
                    .inputs
                    .iter()
                    .position(|(_, _, ib)| *ib == i)
                    .map(|k| (k, 0)),
                BufferKind::Alias { of, offset } => origin
                    .get(*of)
                    .copied()
                    .flatten()
                    .map(|(k, o)| (k, o + offset)),
                _ => None,
            });
            let l = match &b.kind {
                BufferKind::Input { .. } => input_at[i].map_or(Loc::Null, Loc::Arena),
                // Kernels never write weights (the code generator only
                // passes them as operands), so sharing them across
                // concurrent runs is sound.
                BufferKind::Weight(w) => Loc::Fixed(w.as_ptr() as usize),
                BufferKind::Temp => temp_at[i].map_or(Loc::Null, Loc::Arena),
                BufferKind::Alias { of, offset } => match loc.get(*of) {
                    Some(Loc::Arena(o)) => Loc::Arena(o + offset),
                    Some(Loc::Fixed(a)) => Loc::Fixed(a + offset),
                    _ => Loc::Null,
                },
            };
            loc.push(l);
        }
        let mut arg_start = Vec::with_capacity(self.steps.len() + 1);
        let mut args = Vec::new();
        let mut input_args = Vec::new();
        for s in &self.steps {
            arg_start.push(args.len());
            for &b in &s.args {
                if let Some((k, off)) = origin[b] {
                    input_args.push((args.len(), k, off));
                }
                args.push(loc[b]);
            }
        }
        arg_start.push(args.len());
        // Nothing splits: no concurrent wave, no kernel split into tasks,
        // and no kernel with the work a native GEMM needs to split itself
        // (two slices of `GEMM_SHARE_HANDOFFS` hand-offs each,
        // `native::gemm_tasks`).
        let serial = !exec.iter().any(|w| w.concurrent)
            && tasks.iter().all(|&t| t <= 1)
            && self.steps.iter().zip(&gemm_threads).all(|(s, &q)| {
                let handoff = if self.parallel.spin.is_some() {
                    native::TASK_OVERHEAD_MACS_SPIN
                } else {
                    native::TASK_OVERHEAD_MACS
                };
                q <= 1 || s.work < 2 * native::GEMM_SHARE_HANDOFFS * handoff
            });
        self.prepared = Prepared {
            serial,
            waves,
            exec,
            memory,
            arena_bytes,
            loc,
            arg_start,
            args,
            input_offsets,
            input_args,
            origin,
            tasks,
            gemm_threads,
        };
        // Cached states were laid out for the previous plan.
        if let Ok(mut c) = self.states.lock() {
            c.clear();
        }
    }

    /// Lifetime information of every temp buffer for the allocator, in
    /// units of the execution order `exec`: a sequential step is one time
    /// slot, a concurrent wave one slot for all its steps, so every buffer
    /// such a wave touches is live for the whole wave and no two of its
    /// steps can share memory. In-place reuse is offered only for steps
    /// that run alone. A per-task workspace ([`Step::task_ws`]) takes its
    /// declared size times the step's planned `tasks`.
    fn temp_infos(&self, exec: &[Wave], tasks: &[usize]) -> Vec<TempInfo> {
        let root = schedule::roots(&self.buffers);
        let mut slot = vec![0usize; self.steps.len()];
        let mut alone = vec![true; self.steps.len()];
        let mut t = 0usize;
        for w in exec {
            if w.concurrent {
                for &j in &w.steps {
                    slot[j] = t;
                    alone[j] = false;
                }
                t += 1;
            } else {
                for &j in &w.steps {
                    slot[j] = t;
                    t += 1;
                }
            }
        }
        let end = t;
        let mut first = vec![usize::MAX; self.buffers.len()];
        let mut last = vec![0usize; self.buffers.len()];
        for (i, s) in self.steps.iter().enumerate() {
            for &a in &s.args {
                let r = root[a];
                first[r] = first[r].min(slot[i]);
                last[r] = last[r].max(slot[i]);
            }
        }
        for o in &self.outputs {
            last[root[o.buf]] = end;
        }
        let mut copies = vec![1usize; self.buffers.len()];
        for (s, &t) in self.steps.iter().zip(tasks) {
            for &a in &s.task_ws {
                if let Some(&b) = s.args.get(a) {
                    copies[b] = copies[b].max(t);
                }
            }
        }
        let mut temps: Vec<TempInfo> = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b.kind, BufferKind::Temp))
            .map(|(i, b)| TempInfo {
                buf: i,
                bytes: if copies[i] > 1 {
                    task_slice_stride(b.bytes) * copies[i]
                } else {
                    b.bytes
                },
                first_step: first[i].min(last[i]),
                last_step: last[i],
                reuse: None,
            })
            .collect();
        // In-place candidates: the input's root temp is read by no other
        // argument of the step, is reached without an offset and covers
        // the whole input; the planner checks that it dies at this step.
        let mut index = vec![None; self.buffers.len()];
        for (k, t) in temps.iter().enumerate() {
            index[t.buf] = Some(k);
        }
        for (j, s) in self.steps.iter().enumerate() {
            if !alone[j] {
                continue;
            }
            for &(ia, oa) in &s.inplace {
                let (Some(&ib), Some(&ob)) = (s.args.get(ia), s.args.get(oa)) else {
                    continue;
                };
                let r = root[ib];
                let whole = match self.buffers[ib].kind {
                    BufferKind::Temp => true,
                    BufferKind::Alias { offset, .. } => {
                        offset == 0 && self.buffers[ib].bytes == self.buffers[r].bytes
                    }
                    _ => false,
                };
                let single = s.args.iter().filter(|&&a| root[a] == r).count() == 1;
                if let (true, true, Some(d), Some(t)) = (whole, single, index[r], index[ob]) {
                    if temps[d].bytes >= temps[t].bytes && temps[t].reuse.is_none() {
                        temps[t].reuse = Some(d);
                    }
                }
            }
        }
        temps
    }

    /// Runs the executable on `inputs` (matched to the graph inputs by
    /// name, each with exactly its declared type) and returns the graph
    /// outputs in order. Errors are the interpreter's [`RunError`]s.
    pub fn run(&self, inputs: &[(String, Tensor)]) -> Result<Vec<Tensor>, RunError> {
        self.run_inner(inputs, false).map(|(out, _)| out)
    }

    /// [`Executable::run`] that also reports each step's name, op and wall
    /// time, indexed like [`Executable::steps`]. Steps of a concurrent
    /// wave overlap in time, so their sum can exceed the run's wall time.
    pub fn run_profiled(
        &self,
        inputs: &[(String, Tensor)],
    ) -> Result<(Vec<Tensor>, StepTimes), RunError> {
        let (out, state_nanos) = self.run_inner(inputs, true)?;
        let times = self
            .steps
            .iter()
            .zip(state_nanos)
            .map(|(s, ns)| {
                (
                    s.name.clone(),
                    s.op.clone(),
                    std::time::Duration::from_nanos(ns),
                )
            })
            .collect();
        Ok((out, times))
    }

    /// Checks `inputs` against the graph inputs: the tensor for each, in
    /// declaration order.
    fn match_inputs(&self, inputs: &[(String, Tensor)]) -> Result<(), RunError> {
        for (i, (name, _)) in inputs.iter().enumerate() {
            if !self.inputs.iter().any(|(n, _, _)| n == name) {
                let known: Vec<&str> = self.inputs.iter().map(|(n, _, _)| n.as_str()).collect();
                return Err(RunError::UnknownInput {
                    name: name.clone(),
                    graph: self.graph.clone(),
                    known: known.join(", "),
                });
            }
            if inputs[..i].iter().any(|(n, _)| n == name) {
                return Err(RunError::DuplicateInput { name: name.clone() });
            }
        }
        for (name, ty, _) in &self.inputs {
            let t = inputs
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t)
                .ok_or_else(|| RunError::MissingInput {
                    name: name.clone(),
                    expected: ty.clone(),
                })?;
            if t.ty() != *ty {
                return Err(RunError::InputType {
                    name: name.clone(),
                    expected: ty.clone(),
                    found: t.ty(),
                });
            }
        }
        Ok(())
    }

    /// A run state from the cache, or a fresh one for this plan.
    fn take_state(&self) -> RunState {
        if let Some(s) = self.states.lock().ok().and_then(|mut c| c.pop()) {
            return s;
        }
        let p = &self.prepared;
        let mut arena = AlignedBuf::zeroed(p.arena_bytes);
        if let Some(byte) = self.arena_fill {
            arena.as_bytes_mut().fill(byte);
        }
        let base = arena.as_mut_ptr();
        let args = p
            .args
            .iter()
            .map(|l| match *l {
                // SAFETY: the plan places every buffer inside the arena.
                Loc::Arena(off) => unsafe { base.add(off) },
                Loc::Fixed(a) => a as *mut u8,
                Loc::Null => std::ptr::null_mut(),
            })
            .collect();
        RunState {
            arena,
            args,
            inputs_at: Vec::with_capacity(self.inputs.len()),
            rcs: (0..self.steps.len()).map(|_| AtomicI32::new(0)).collect(),
            nanos: (0..self.steps.len()).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn run_inner(
        &self,
        inputs: &[(String, Tensor)],
        profile: bool,
    ) -> Result<(Vec<Tensor>, Vec<u64>), RunError> {
        self.match_inputs(inputs)?;
        let mut state = self.take_state();
        let p = &self.prepared;
        let base = state.arena.as_mut_ptr();
        // Each graph input is read where the caller's tensor holds it when
        // its elements lie contiguously in row-major order (no kernel
        // writes a graph input, and the planner never hands an input's
        // memory to another buffer), else copied into its arena slot.
        let mut at = std::mem::take(&mut state.inputs_at);
        at.clear();
        for ((name, _, _), &off) in self.inputs.iter().zip(&p.input_offsets) {
            let t = inputs.iter().find(|(n, _)| n == name).map(|(_, t)| t);
            // SAFETY: the arena reserves the input's declared size at
            // `off`, and `match_inputs` checked the tensor has that type.
            let dst = unsafe { base.add(off) };
            at.push(match t.and_then(in_place) {
                Some(ptr) => ptr,
                None => {
                    if let Some(t) = t {
                        // SAFETY: as above.
                        unsafe { write_tensor(t, dst) };
                    }
                    dst
                }
            });
        }
        for &(ai, k, off) in &p.input_args {
            // SAFETY: `off` lies inside input `k` (a view of it).
            state.args[ai] = unsafe { at[k].add(off) } as *mut u8;
        }
        let ctx = RunCtx {
            exe: self,
            args: &state.args,
            rcs: &state.rcs,
            nanos: profile.then_some(&state.nanos[..]),
        };
        let result = match &self.parallel.pool {
            // A plan in which nothing splits runs on the caller's thread:
            // handing it to the pool would only add the hand-off.
            Some(_) if self.prepared.serial => ctx.exec(),
            Some(pool) => {
                let threads = self.parallel.threads();
                let exec = || native::with_threads(threads, || ctx.exec());
                // Steps of a concurrent wave with several threads each
                // split on the rayon pool (spin workers do not nest).
                let nested = self
                    .prepared
                    .exec
                    .iter()
                    .any(|w| w.concurrent && w.threads_per_step > 1);
                match &self.parallel.spin {
                    // The run stays on the caller's thread with the hot
                    // workers: handing it to a rayon worker and back would
                    // cost two wake-ups per run. Only when another run owns
                    // them does this one go to the rayon pool.
                    Some(spin) if !nested => spin.run_or(exec, || pool.install(exec)),
                    Some(spin) => pool.install(|| spin.run(exec)),
                    None => pool.install(exec),
                }
            }
            None => ctx.exec(),
        };
        let out = result.and_then(|()| {
            let mut out = Vec::with_capacity(self.outputs.len());
            for o in &self.outputs {
                let ptr = match (p.origin[o.buf], p.loc[o.buf]) {
                    // SAFETY: a view inside input `k`.
                    (Some((k, off)), _) => unsafe { at[k].add(off) },
                    (None, l) => match l {
                        // SAFETY: inside the arena, as planned.
                        Loc::Arena(off) => unsafe { base.add(off) as *const u8 },
                        Loc::Fixed(a) => a as *const u8,
                        Loc::Null => {
                            return Err(RunError::Output {
                                name: o.name.clone(),
                            })
                        }
                    },
                };
                // SAFETY: the buffer holds exactly `o.ty` in row-major order.
                out.push(unsafe { tensor_from_ptr(ptr, &o.ty) });
            }
            Ok(out)
        });
        state.inputs_at = at;
        let nanos = if profile {
            state
                .nanos
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect()
        } else {
            Vec::new()
        };
        if let Ok(mut c) = self.states.lock() {
            c.push(state);
        }
        out.map(|o| (o, nanos))
    }

    /// The error of step `j` returning `rc != 0`.
    fn op_error(&self, j: usize, rc: i32) -> RunError {
        let s = &self.steps[j];
        let message = usize::try_from(rc - 1)
            .ok()
            .and_then(|k| s.errors.get(k))
            .cloned()
            .unwrap_or_else(|| format!("kernel failed with code {rc}"));
        RunError::Op {
            node: s.name.clone(),
            op: s.op.clone(),
            message,
        }
    }
}

/// The tasks a step planned as `tasks` shares runs as: each share cut
/// into [`native::task_chunks`] while every chunk keeps the work
/// a planned task must carry (`schedule::kernel_tasks`). A kernel with a
/// per-task workspace ([`Step::task_ws`]) keeps its planned tasks: the
/// planner sized that workspace for them.
fn chunks(tasks: usize, s: &Step) -> usize {
    if tasks <= 1 || !s.task_ws.is_empty() {
        return tasks;
    }
    native::chunks_for_work(tasks, s.work, 4, s.largest_extent())
}

/// A step's argument array, shared by the tasks of one split call.
struct ArgPtr(*const *mut u8);

// SAFETY: the array and the buffers it points to outlive the call's scope;
// the tasks only read the array and write disjoint parts of the buffers.
unsafe impl Sync for ArgPtr {}

/// One run's view of its state, shared by the pool threads of a
/// concurrent wave.
struct RunCtx<'a> {
    exe: &'a Executable,
    args: &'a [*mut u8],
    rcs: &'a [AtomicI32],
    nanos: Option<&'a [AtomicU64]>,
}

// SAFETY: the pointers address the run's arena and the executable's
// weights, which outlive the run; steps that run at the same time touch
// disjoint arena memory (the planner keeps every buffer of a concurrent
// wave live for the whole wave) and only read weights.
unsafe impl Sync for RunCtx<'_> {}

impl RunCtx<'_> {
    /// Calls step `j` (each phase as its planned number of tasks),
    /// recording its time when profiling.
    fn call(&self, j: usize) -> i32 {
        let p = &self.exe.prepared;
        let step = &self.exe.steps[j];
        let args = ArgPtr(self.args[p.arg_start[j]..].as_ptr());
        let tasks = chunks(p.tasks[j], step);
        let t0 = self.nanos.map(|_| std::time::Instant::now());
        let mut rc = Self::call_tasks(step.func, &args, tasks, 0);
        for (i, &extent) in step.phase_splits.iter().enumerate() {
            if rc != 0 {
                break;
            }
            rc = Self::call_tasks(step.func, &args, tasks.min(extent.max(1)), i + 1);
        }
        if let (Some(n), Some(t0)) = (self.nanos, t0) {
            n[j].store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        rc
    }

    /// Runs phase `phase` of a kernel as `tasks` concurrent tasks.
    fn call_tasks(func: KernelFn, args: &ArgPtr, tasks: usize, phase: usize) -> i32 {
        if tasks <= 1 {
            // SAFETY: the code generator sized every buffer for the value
            // it holds and generated `func` for exactly these arguments.
            return unsafe { func(args.0, 0, 1, phase) };
        }
        // The first failing task (lowest index) is the step's error, as
        // one thread would have met it first: keep the minimum of
        // `task << 32 | rc` over failing tasks.
        let first = AtomicU64::new(u64::MAX);
        let task = |t: usize| {
            // SAFETY: as above; the tasks of one phase write disjoint units
            // of its outputs (the kernel ABI), and GEMMs inside a task run
            // on its thread only.
            let rc = native::with_threads(1, || unsafe { func(args.0, t, tasks, phase) });
            if rc != 0 {
                first.fetch_min(((t as u64) << 32) | rc as u32 as u64, Ordering::Relaxed);
            }
        };
        spin::par_for(tasks, &task);
        match first.load(Ordering::Relaxed) {
            u64::MAX => 0,
            v => v as u32 as i32,
        }
    }

    /// Runs every wave in order; the first failing step (in step order
    /// within a concurrent wave) is the error.
    fn exec(&self) -> Result<(), RunError> {
        for w in &self.exe.prepared.exec {
            if !w.concurrent {
                let threads = self.exe.parallel.threads();
                for &j in &w.steps {
                    let q = self.exe.prepared.gemm_threads[j];
                    let rc = if q == threads {
                        self.call(j)
                    } else {
                        native::with_threads(q, || self.call(j))
                    };
                    if rc != 0 {
                        return Err(self.exe.op_error(j, rc));
                    }
                }
                continue;
            }
            let q = w.threads_per_step;
            spin::par_for_list(w.steps.len(), &|i| {
                let j = w.steps[i];
                let rc = native::with_threads(q, || self.call(j));
                self.rcs[j].store(rc, Ordering::Relaxed);
            });
            for &j in &w.steps {
                let rc = self.rcs[j].load(Ordering::Relaxed);
                if rc != 0 {
                    return Err(self.exe.op_error(j, rc));
                }
            }
        }
        Ok(())
    }
}

/// Writes `t`'s elements in row-major order at `dst` (bool as one byte).
///
/// # Safety
/// `dst` must point to `t.ty().size_bytes()` writable bytes.
/// Where a run may read `t` in place: its first element, when its
/// elements lie contiguously in row-major order in the layout kernels read
/// (f32 and i64; booleans are copied as bytes).
fn in_place(t: &Tensor) -> Option<*const u8> {
    match t {
        Tensor::F32(a) => a.as_slice().map(|s| s.as_ptr() as *const u8),
        Tensor::I64(a) => a.as_slice().map(|s| s.as_ptr() as *const u8),
        Tensor::Bool(_) => None,
    }
}

unsafe fn write_tensor(t: &Tensor, dst: *mut u8) {
    match t {
        Tensor::F32(a) => match a.as_slice() {
            Some(s) => std::ptr::copy_nonoverlapping(s.as_ptr() as *const u8, dst, s.len() * 4),
            None => {
                for (i, v) in a.iter().enumerate() {
                    (dst as *mut f32).add(i).write_unaligned(*v);
                }
            }
        },
        Tensor::I64(a) => match a.as_slice() {
            Some(s) => std::ptr::copy_nonoverlapping(s.as_ptr() as *const u8, dst, s.len() * 8),
            None => {
                for (i, v) in a.iter().enumerate() {
                    (dst as *mut i64).add(i).write_unaligned(*v);
                }
            }
        },
        Tensor::Bool(a) => {
            for (i, v) in a.iter().enumerate() {
                *dst.add(i) = *v as u8;
            }
        }
    }
}

/// Copies `ty.numel()` elements at `p` into a tensor.
///
/// # Safety
/// `p` must point to `ty.size_bytes()` readable bytes laid out as `ty`.
unsafe fn tensor_from_ptr(p: *const u8, ty: &TensorType) -> Tensor {
    let n = ty.numel();
    let shape = IxDyn(&ty.shape);
    match ty.dtype {
        DType::F32 => {
            let v = std::slice::from_raw_parts(p as *const f32, n).to_vec();
            Tensor::F32(ArrayD::from_shape_vec(shape, v).expect("shape matches numel"))
        }
        DType::I64 => {
            let v = std::slice::from_raw_parts(p as *const i64, n).to_vec();
            Tensor::I64(ArrayD::from_shape_vec(shape, v).expect("shape matches numel"))
        }
        DType::Bool => {
            let v: Vec<bool> = std::slice::from_raw_parts(p, n)
                .iter()
                .map(|&b| b != 0)
                .collect();
            Tensor::Bool(ArrayD::from_shape_vec(shape, v).expect("shape matches numel"))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const N: usize = 4096;

    /// Does nothing (for schedule tests).
    pub(crate) unsafe extern "C" fn nop(_: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
        0
    }

    unsafe extern "C" fn add_one(a: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
        let (x, y) = (*a as *const f32, *a.add(1) as *mut f32);
        for i in 0..N {
            *y.add(i) = *x.add(i) + 1.0;
        }
        0
    }

    unsafe extern "C" fn double(a: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
        let (x, y) = (*a as *const f32, *a.add(1) as *mut f32);
        for i in 0..N {
            *y.add(i) = *x.add(i) * 2.0;
        }
        0
    }

    unsafe extern "C" fn sum2(a: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
        let (x, y, z) = (
            *a as *const f32,
            *a.add(1) as *const f32,
            *a.add(2) as *mut f32,
        );
        for i in 0..N {
            *z.add(i) = *x.add(i) + *y.add(i);
        }
        0
    }

    unsafe extern "C" fn fails(_: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
        1
    }

    /// Planned shares are cut into `native::task_chunks()` tasks only
    /// while each keeps a planned task's work and a unit of the extent,
    /// and never for a kernel whose per-task workspace was sized for its
    /// planned tasks (an im2col stem wrote past it when it was).
    #[test]
    fn planned_shares_are_cut_into_chunks_within_extent_work_and_workspace() {
        let c = native::task_chunks();
        let step = |split: usize, work: u64, task_ws: Vec<usize>| Step {
            name: "k".into(),
            op: "Test".into(),
            func: nop,
            args: vec![0, 1],
            errors: Vec::new(),
            nodes: Vec::new(),
            algo: None,
            inplace: Vec::new(),
            writes: vec![1],
            work,
            split_work: 0,
            split,
            phase_splits: Vec::new(),
            split_units: Vec::new(),
            task_ws,
        };
        let h = 4 * native::TASK_OVERHEAD_MACS_SPIN;
        assert_eq!(chunks(1, &step(1000, 1000 * h, vec![])), 1);
        assert_eq!(chunks(2, &step(1000, 1000 * h, vec![])), 2 * c);
        // Three units or three tasks' work: two chunks, one a thread (a
        // third chunk would leave one thread two).
        assert_eq!(chunks(2, &step(3, 1000 * h, vec![])), 2);
        assert_eq!(chunks(2, &step(1000, 3 * h, vec![])), 2);
        assert_eq!(chunks(2, &step(7, 1000 * h, vec![])), 6.min(2 * c));
        assert_eq!(chunks(3, &step(7, 1000 * h, vec![])), 6.min(3 * c));
        assert_eq!(chunks(2, &step(1000, 1000 * h, vec![1])), 2);
    }

    /// Two independent chains joined at the end:
    /// `y = ((x + 1) + 1) + 2 (2 x)`; steps 0/1 and 2/3 are independent.
    /// `bad` makes step 3 report an error.
    fn diamond(bad: bool) -> Executable {
        let ty = TensorType::f32(vec![N]);
        let temp = |name: &str| Buffer {
            name: name.into(),
            bytes: N * 4,
            kind: BufferKind::Temp,
        };
        let buffers = vec![
            Buffer {
                name: "x".into(),
                bytes: N * 4,
                kind: BufferKind::Input { name: "x".into() },
            },
            temp("a"),
            temp("b"),
            temp("c"),
            temp("d"),
            temp("y"),
        ];
        let step = |name: &str, func: KernelFn, args: Vec<BufId>| Step {
            name: name.into(),
            op: "Test".into(),
            func,
            writes: vec![args.len() - 1],
            args,
            errors: vec!["step failed on purpose".into()],
            nodes: vec![name.into()],
            algo: None,
            inplace: Vec::new(),
            work: 100 * native::TASK_OVERHEAD_MACS,
            split_work: 0,
            split: 1,
            phase_splits: Vec::new(),
            split_units: Vec::new(),
            task_ws: Vec::new(),
        };
        let steps = vec![
            step("a", add_one, vec![0, 1]),
            step("b", double, vec![0, 2]),
            step("c", add_one, vec![1, 3]),
            step("d", if bad { fails } else { double }, vec![2, 4]),
            step("y", sum2, vec![3, 4, 5]),
        ];
        Executable::new(
            "diamond".into(),
            vec![("x".into(), ty.clone(), 0)],
            vec![OutputSpec {
                name: "y".into(),
                buf: 5,
                ty,
            }],
            buffers,
            steps,
            Arc::new(()),
            Box::new(GreedyPlanner),
        )
    }

    fn input() -> Vec<(String, Tensor)> {
        let x: Vec<f32> = (0..N).map(|i| (i as f32 * 0.37).sin()).collect();
        vec![(
            "x".into(),
            Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[N]), x).unwrap()),
        )]
    }

    fn expected() -> Vec<u32> {
        (0..N)
            .map(|i| {
                let x = (i as f32 * 0.37).sin();
                (((x + 1.0) + 1.0) + (x * 2.0) * 2.0).to_bits()
            })
            .collect()
    }

    fn bits(t: &[Tensor]) -> Vec<u32> {
        match &t[0] {
            Tensor::F32(a) => a.iter().map(|v| v.to_bits()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn independent_steps_form_waves_and_run_concurrently() {
        let mut e = diamond(false);
        let one = e.run(&input()).unwrap();
        assert_eq!(bits(&one), expected());
        assert!(!e.has_concurrency());
        e.set_threads(2).unwrap();
        let w: Vec<(Vec<usize>, bool)> = e
            .waves()
            .iter()
            .map(|w| (w.steps.clone(), w.concurrent))
            .collect();
        assert_eq!(
            w,
            vec![(vec![0, 1], true), (vec![2, 3], true), (vec![4], false)]
        );
        assert!(e.has_concurrency());
        assert_eq!(bits(&e.run(&input()).unwrap()), expected());
        e.set_concurrency(Concurrency::Never);
        assert!(!e.has_concurrency());
        assert_eq!(bits(&e.run(&input()).unwrap()), expected());
    }

    #[test]
    fn buffers_of_a_concurrent_wave_never_overlap() {
        let mut e = diamond(false);
        let sequential = e.memory();
        e.set_threads(2).unwrap();
        e.set_concurrency(Concurrency::Always);
        for w in e.waves().iter().filter(|w| w.concurrent) {
            let ranges: Vec<std::ops::Range<usize>> = w
                .steps
                .iter()
                .flat_map(|&j| e.steps()[j].args.iter())
                .filter_map(|&b| e.arena_range(b))
                .collect();
            for (i, r) in ranges.iter().enumerate() {
                for s in &ranges[..i] {
                    assert!(
                        r == s || r.end <= s.start || s.end <= r.start,
                        "{r:?} {s:?}"
                    );
                }
            }
        }
        // One thread overlaps a/b-style temps the concurrent plan cannot.
        assert!(e.memory().planned >= sequential.planned);
        assert!(e.memory().planned >= e.memory().lower_bound);
    }

    #[test]
    fn one_executable_runs_on_several_threads_at_once() {
        let mut e = diamond(false);
        e.set_threads(2).unwrap();
        let e = &e;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(move || {
                    for _ in 0..20 {
                        assert_eq!(bits(&e.run(&input()).unwrap()), expected());
                    }
                });
            }
        });
    }

    #[test]
    fn errors_and_profiles_of_concurrent_steps() {
        let mut e = diamond(true);
        e.set_threads(2).unwrap();
        assert!(e.has_concurrency());
        match e.run(&input()) {
            Err(RunError::Op { node, message, .. }) => {
                assert_eq!(node, "d");
                assert_eq!(message, "step failed on purpose");
            }
            other => panic!("{other:?}"),
        }
        let mut e = diamond(false);
        e.set_threads(2).unwrap();
        let (out, times) = e.run_profiled(&input()).unwrap();
        assert_eq!(bits(&out), expected());
        let names: Vec<&str> = times.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "y"]);
    }

    #[test]
    fn input_errors_match_the_interpreter() {
        let e = diamond(false);
        let x = input();
        let mut two = x.clone();
        two.extend(x.clone());
        assert!(matches!(e.run(&two), Err(RunError::DuplicateInput { .. })));
        assert!(matches!(e.run(&[]), Err(RunError::MissingInput { .. })));
        let other = vec![("z".to_string(), x[0].1.clone())];
        assert!(matches!(e.run(&other), Err(RunError::UnknownInput { .. })));
    }
}

#[cfg(test)]
mod cache_tests {
    use super::{l2_bytes, parse_cache_size};

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("512K"), Some(512 << 10));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("2048"), Some(2048));
        for bad in ["", "K", "12Q", "0K", "-1K"] {
            assert_eq!(parse_cache_size(bad), None, "{bad:?}");
        }
        // Whatever this machine reports, a plausible L2.
        assert!(
            (64 << 10..=64 << 20).contains(&l2_bytes()),
            "{}",
            l2_bytes()
        );
    }
}
