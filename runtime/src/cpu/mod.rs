//! The compiled CPU executable: natively generated kernels run in order over
//! flat buffers.
//!
//! The code generator (in `dnnc-compiler`) produces one native function per
//! kernel; this module owns what it takes to *run* them and nothing about
//! how they were made, so the runtime keeps depending only on `dnnc-ir`.
//!
//! # Kernel ABI
//!
//! Every kernel is `unsafe extern "C" fn(args: *const *mut u8) -> i32`.
//! `args` points to one pointer per buffer the kernel touches, in the order
//! of [`Step::args`]; each buffer is the dense row-major data of one value
//! (f32 as 4 bytes, i64 as 8, bool as 1), or a workspace. The return value
//! is 0 on success, or `k >= 1` to report [`Step::errors`]`[k - 1]` (e.g. a
//! gather index out of range) — generated code never panics or aborts.
//!
//! Buffers are 64-byte aligned. An executable is immutable after
//! compilation, so one instance may run on many threads at once: every run
//! gets fresh activation memory, and weights are only read.

mod alloc;
pub mod fftconv;
pub mod native;
pub mod pgemm;
mod plan;

pub use alloc::{AlignedBuf, Allocator, ArenaPlan, PerValueAllocator, TempInfo, ALIGN};
pub use plan::GreedyPlanner;

use crate::RunError;
use dnnc_ir::{DType, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// A generated kernel: reads and writes the buffers whose pointers `args`
/// lists, returns 0 or a 1-based error index (see the module docs).
pub type KernelFn = unsafe extern "C" fn(args: *const *mut u8) -> i32;

/// Per-step profile entries: kernel name, op(s), wall time.
pub type StepTimes = Vec<(String, String, std::time::Duration)>;

/// Index of a buffer in [`Executable::buffers`].
pub type BufId = usize;

/// Where a buffer's memory comes from.
#[derive(Debug)]
pub enum BufferKind {
    /// A graph input, copied in at the start of each run.
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
pub struct Executable {
    /// Graph name, for messages.
    pub graph: String,
    /// Graph inputs in declaration order.
    pub inputs: Vec<(String, TensorType, BufId)>,
    /// Graph outputs in order.
    pub outputs: Vec<OutputSpec>,
    /// Every buffer; aliases refer only to earlier ones.
    pub buffers: Vec<Buffer>,
    /// Kernel calls in execution order.
    pub steps: Vec<Step>,
    /// Keeps the generated code alive (e.g. the JIT module).
    pub code: Arc<dyn Any + Send + Sync>,
    /// Places activation memory; [`PerValueAllocator`] unless replaced.
    pub allocator: Box<dyn Allocator>,
    /// Arenas of finished runs, reused so repeated runs neither allocate
    /// nor page-fault (kernels write every temp before reading it, so
    /// stale contents are harmless).
    pub arena_cache: std::sync::Mutex<Vec<AlignedBuf>>,
    /// Threads a run may use ([`Executable::set_threads`]); one by default.
    pub parallel: Parallel,
}

/// The executable's worker threads: a persistent rayon pool, so runs do not
/// spawn threads.
#[derive(Debug, Default)]
pub struct Parallel {
    pool: Option<rayon::ThreadPool>,
}

impl Parallel {
    /// Threads a run uses (1 when no pool is set).
    pub fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads())
    }
}

/// Activation memory of an executable, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// Number of kernel calls per run.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Sets the number of threads runs use (a persistent pool of that many
    /// workers; 1 runs on the caller's thread). Large GEMMs are split across
    /// them when the W-D work pays for it; results do not change.
    pub fn set_threads(&mut self, threads: usize) -> Result<(), String> {
        if threads == 0 {
            return Err("the thread count must be at least 1".into());
        }
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
        Ok(())
    }

    /// Peak activation bytes as planned by the executable's allocator,
    /// against one buffer per temp and the live-set lower bound.
    pub fn memory(&self) -> MemoryReport {
        let temps = self.temp_infos();
        let iv = plan::intervals(&temps);
        let p = dnnc_ir::memplan::plan(&iv, ALIGN);
        MemoryReport {
            planned: self.allocator.plan(&temps).total_bytes,
            naive: dnnc_ir::memplan::naive_bytes(&iv, ALIGN),
            lower_bound: dnnc_ir::memplan::lower_bound(&iv, ALIGN),
            in_place: p.in_place,
        }
    }

    /// Lifetime information of every temp buffer, for the allocator.
    fn temp_infos(&self) -> Vec<TempInfo> {
        let mut first = vec![usize::MAX; self.buffers.len()];
        let mut last = vec![0usize; self.buffers.len()];
        let root = |mut b: BufId| {
            while let BufferKind::Alias { of, .. } = self.buffers[b].kind {
                b = of;
            }
            b
        };
        for (i, s) in self.steps.iter().enumerate() {
            for &a in &s.args {
                let r = root(a);
                first[r] = first[r].min(i);
                last[r] = last[r].max(i);
            }
        }
        for o in &self.outputs {
            last[root(o.buf)] = self.steps.len();
        }
        let mut temps: Vec<TempInfo> = self
            .buffers
            .iter()
            .enumerate()
            .filter(|(_, b)| matches!(b.kind, BufferKind::Temp))
            .map(|(i, b)| TempInfo {
                buf: i,
                bytes: b.bytes,
                first_step: first[i].min(last[i]),
                last_step: last[i],
                reuse: None,
            })
            .collect();
        // In-place candidates: the input's root temp is read by no other
        // argument of the step, is reached without an offset and covers
        // the whole input; the planner checks that it dies at this step.
        let index: HashMap<BufId, usize> =
            temps.iter().enumerate().map(|(k, t)| (t.buf, k)).collect();
        for s in &self.steps {
            for &(ia, oa) in &s.inplace {
                let (Some(&ib), Some(&ob)) = (s.args.get(ia), s.args.get(oa)) else {
                    continue;
                };
                let r = root(ib);
                let whole = match self.buffers[ib].kind {
                    BufferKind::Temp => true,
                    BufferKind::Alias { of, offset } => {
                        offset == 0 && of == r && self.buffers[ib].bytes == self.buffers[r].bytes
                    }
                    _ => false,
                };
                let alone = s.args.iter().filter(|&&a| root(a) == r).count() == 1;
                if let (true, true, Some(&d), Some(&t)) =
                    (whole, alone, index.get(&r), index.get(&ob))
                {
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
        self.run_inner(inputs, None)
    }

    /// [`Executable::run`] that also reports each step's name, op and wall
    /// time, for profiling.
    pub fn run_profiled(
        &self,
        inputs: &[(String, Tensor)],
    ) -> Result<(Vec<Tensor>, StepTimes), RunError> {
        let mut times = Vec::with_capacity(self.steps.len());
        let out = self.run_inner(inputs, Some(&mut times))?;
        Ok((out, times))
    }

    fn run_inner(
        &self,
        inputs: &[(String, Tensor)],
        times: Option<&mut StepTimes>,
    ) -> Result<Vec<Tensor>, RunError> {
        let mut provided: HashMap<&str, &Tensor> = HashMap::new();
        for (name, t) in inputs {
            if !self.inputs.iter().any(|(n, _, _)| n == name) {
                let known: Vec<&str> = self.inputs.iter().map(|(n, _, _)| n.as_str()).collect();
                return Err(RunError::UnknownInput {
                    name: name.clone(),
                    graph: self.graph.clone(),
                    known: known.join(", "),
                });
            }
            if provided.insert(name.as_str(), t).is_some() {
                return Err(RunError::DuplicateInput { name: name.clone() });
            }
        }
        let mut input_bufs: HashMap<BufId, AlignedBuf> = HashMap::new();
        for (name, ty, buf) in &self.inputs {
            let t = provided
                .get(name.as_str())
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
            input_bufs.insert(*buf, AlignedBuf::from_tensor(t));
        }

        let temps = self.temp_infos();
        let plan = self.allocator.plan(&temps);
        let cached = self.arena_cache.lock().ok().and_then(|mut c| {
            let i = c.iter().position(|a| a.len() >= plan.total_bytes)?;
            Some(c.swap_remove(i))
        });
        let mut arena = cached.unwrap_or_else(|| AlignedBuf::zeroed(plan.total_bytes));
        let base = arena.as_mut_ptr();
        let mut temp_offset: HashMap<BufId, usize> = HashMap::new();
        for (t, &off) in temps.iter().zip(&plan.offsets) {
            temp_offset.insert(t.buf, off);
        }
        let mut ptrs: Vec<*mut u8> = Vec::with_capacity(self.buffers.len());
        for (i, b) in self.buffers.iter().enumerate() {
            let p = match &b.kind {
                BufferKind::Input { .. } => match input_bufs.get_mut(&i) {
                    Some(buf) => buf.as_mut_ptr(),
                    None => std::ptr::null_mut(),
                },
                // Kernels never write weights (the code generator only
                // passes them as operands), so sharing them across
                // concurrent runs is sound.
                BufferKind::Weight(w) => w.as_ptr() as *mut u8,
                BufferKind::Temp => {
                    let off = temp_offset.get(&i).copied().unwrap_or(0);
                    // SAFETY: the plan places every temp inside the arena.
                    unsafe { base.add(off) }
                }
                BufferKind::Alias { of, offset } => {
                    let root = ptrs.get(*of).copied().unwrap_or(std::ptr::null_mut());
                    if root.is_null() {
                        std::ptr::null_mut()
                    } else {
                        // SAFETY: aliases stay inside the aliased buffer.
                        unsafe { root.add(*offset) }
                    }
                }
            };
            ptrs.push(p);
        }

        let threads = self.parallel.threads();
        let run = SendRun {
            exe: self,
            ptrs: &ptrs,
            times,
        };
        match &self.parallel.pool {
            Some(pool) => pool.install(move || native::with_threads(threads, move || run.go()))?,
            None => run.go()?,
        }

        let mut out = Vec::with_capacity(self.outputs.len());
        for o in &self.outputs {
            let p = ptrs[o.buf];
            if p.is_null() {
                return Err(RunError::Output {
                    name: o.name.clone(),
                });
            }
            // SAFETY: the buffer holds exactly `o.ty` in row-major order.
            out.push(unsafe { tensor_from_ptr(p, &o.ty) });
        }
        if let Ok(mut c) = self.arena_cache.lock() {
            c.push(arena);
        }
        Ok(out)
    }

    /// Runs every step on the buffers at `ptrs`.
    fn exec_steps(
        &self,
        ptrs: &[*mut u8],
        mut times: Option<&mut StepTimes>,
    ) -> Result<(), RunError> {
        let mut args: Vec<*mut u8> = Vec::new();
        for s in &self.steps {
            args.clear();
            args.extend(s.args.iter().map(|&b| ptrs[b]));
            let t0 = times.as_ref().map(|_| std::time::Instant::now());
            // SAFETY: the code generator sized every buffer for the value
            // it holds and generated `func` for exactly these arguments.
            let rc = unsafe { (s.func)(args.as_ptr()) };
            if let (Some(t), Some(t0)) = (times.as_deref_mut(), t0) {
                t.push((s.name.clone(), s.op.clone(), t0.elapsed()));
            }
            if rc != 0 {
                let message = usize::try_from(rc - 1)
                    .ok()
                    .and_then(|k| s.errors.get(k))
                    .cloned()
                    .unwrap_or_else(|| format!("kernel failed with code {rc}"));
                return Err(RunError::Op {
                    node: s.name.clone(),
                    op: s.op.clone(),
                    message,
                });
            }
        }
        Ok(())
    }
}

/// One run's steps, moved onto a pool thread.
struct SendRun<'a> {
    exe: &'a Executable,
    ptrs: &'a [*mut u8],
    times: Option<&'a mut StepTimes>,
}

// SAFETY: the pointers address the run's arena, inputs and the
// executable's weights, all of which outlive the run; the caller waits for
// the pool to finish before touching them again.
unsafe impl Send for SendRun<'_> {}

impl SendRun<'_> {
    fn go(self) -> Result<(), RunError> {
        self.exe.exec_steps(self.ptrs, self.times)
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
