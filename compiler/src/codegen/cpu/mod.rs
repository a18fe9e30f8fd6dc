//! Native CPU code generation with Cranelift.
//!
//! [`compile_cpu`] groups the graph into kernels (a contraction with its
//! elementwise epilogue, an elementwise chain, a reduction, a copy), emits
//! one Cranelift function per kernel through `cranelift-jit`, and returns a
//! [`dnnc_runtime::cpu::Executable`] that runs them in order. GEMMs call
//! the runtime's tuned `dnnc_sgemm` micro-kernel; packing (im2col), loops
//! and epilogues are generated. Views (Reshape, Flatten, ...) alias their
//! input's buffer and cost nothing.
//!
//! The interpreter is never a fallback: an op without a lowering is a
//! [`CodegenError::Unsupported`] naming the node.

mod blocked;
mod contraction;
mod conv_pool;
mod convt;
mod cost;
mod direct;
mod dw8;
mod einsum;
mod elementwise;
mod emit;
mod extended;
mod fastconv;
pub(crate) mod group;
mod group8;
pub(crate) mod into_blocked;
mod math;
mod movement;
pub mod partition;
mod planes;
mod recurrent;
mod reduce;
mod resize;

pub use contraction::{conv_plan, ConvAlgo, ConvChoice};

use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{AbiParam, InstBuilder, UserFuncName};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use dnnc_ir::{DType, Graph, NodeId, Op, Tensor, ValueId};
use dnnc_runtime::cpu::{
    native, AlignedBuf, BufId, Buffer, BufferKind, Executable, GreedyPlanner, KernelFn, OutputSpec,
    Step,
};
use emit::Emit;
use group::{Kernel, KernelKind};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Options of the CPU code generator. `Default` picks everything
/// automatically.
#[derive(Clone, Debug, Default)]
pub struct CpuOptions {
    /// Force one convolution algorithm where it applies (`None`: choose
    /// per convolution).
    pub conv_algo: Option<ConvAlgo>,
    /// Per-node convolution algorithms, keyed by the Conv2d's result name;
    /// they take precedence over `conv_algo`, which takes precedence over
    /// the node's `algo` attribute (then the heuristic). A forced algorithm
    /// that does not apply falls back, as [`conv_plan`] reports.
    pub conv_algo_for: HashMap<String, ConvAlgo>,
    /// What decides how the executable splits kernels across threads and
    /// which independent kernels run concurrently.
    pub partition: PartitionModel,
    /// Keep every activation in NCHW. Otherwise chains of pointwise and
    /// depthwise convs run channel-blocked (the `block-channels` pass),
    /// unless an algorithm is forced (`conv_algo`, `conv_algo_for`, which
    /// name NCHW lowerings).
    pub nchw_only: bool,
    /// Keep max and average pools and channel Concats out of the
    /// channel-blocked regions, in NCHW (the opposite of
    /// [`dnnc_passes::block_channels::BlockOptions::pools_and_concats`]),
    /// for comparison: GoogLeNet's and SqueezeNet's regions then end at
    /// each inception or fire module's Concat.
    pub plain_pools: bool,
    /// Keep the convs of a channel-blocked inverted residual block
    /// (expansion, depthwise, projection) kernels of their own, each
    /// result written out, instead of one kernel that computes the block
    /// a row at a time, and a max pool apart from the im2col conv that
    /// feeds it (for comparison).
    pub unfused_blocks: bool,
    /// Store every activation with dense planes: no padding of `H x W`
    /// planes to whole cache lines (`planes`), for comparison.
    pub dense_planes: bool,
}

/// What decides a CPU executable's partition (tasks per kernel, threads
/// per GEMM, concurrent waves; [`partition`]).
#[derive(Clone, Debug)]
pub enum PartitionModel {
    /// The calibrated cost model on this machine profile (`None`: the
    /// built-in one), from each kernel's predicted time
    /// ([`partition::CalibratedCost`]). The default.
    Calibrated(Option<dnnc_passes::cost::MachineProfile>),
    /// The runtime's own Work-Depth rule (work counts and fixed hand-off
    /// budgets), for comparison.
    RuntimeRule,
}

impl Default for PartitionModel {
    fn default() -> Self {
        PartitionModel::Calibrated(None)
    }
}

/// Why a graph could not be compiled for the CPU. Each names the node.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    /// The backend has no lowering for this op or this use of it.
    #[error("{op} `%{node}`: the CPU backend cannot compile this ({reason})")]
    Unsupported {
        /// Node name (its first result).
        node: String,
        /// Op name.
        op: String,
        /// What is missing.
        reason: String,
    },
    /// The GPU backend has no lowering for this op or this use of it.
    #[error("{op} `%{node}`: the GPU backend cannot compile this ({reason})")]
    GpuUnsupported {
        /// Node name (its first result).
        node: String,
        /// Op name.
        op: String,
        /// What is missing.
        reason: String,
    },
    /// A parameter or constant has no usable data.
    #[error("weight `%{name}`: {message}")]
    Weight {
        /// Value name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// A generated WGSL shader failed naga's validation (a code generator
    /// bug): reported with the shader, never shipped to a driver.
    #[error("internal compiler error: kernel `{kernel}`: the generated WGSL shader is invalid:\n{message}\n--- shader source ---\n{shader}")]
    Shader {
        /// Kernel (stage) name.
        kernel: String,
        /// naga's diagnostic.
        message: String,
        /// The shader.
        shader: String,
    },
    /// Cranelift rejected generated code (a code generator bug).
    #[error("kernel `{kernel}`: code generation failed: {message}")]
    Backend {
        /// Kernel name.
        kernel: String,
        /// Cranelift's message.
        message: String,
    },
}

/// Keeps the JIT code alive for as long as an executable refers to it, and
/// frees it afterwards.
struct JitCode(Mutex<Option<JITModule>>);

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Ok(mut m) = self.0.lock() {
            if let Some(m) = m.take() {
                // SAFETY: the executable owning this is being dropped, so no
                // kernel can run any more.
                unsafe { m.free_memory() };
            }
        }
    }
}

/// Per-kernel facts the lowerings use.
pub(crate) struct KCtx<'g> {
    /// The graph.
    pub g: &'g Graph,
    /// The kernel being lowered.
    pub k: &'g Kernel,
    /// Argument index of every input and output value.
    pub arg_of: HashMap<ValueId, usize>,
    /// Argument indices of the workspaces requested.
    pub ws: Vec<usize>,
    /// Argument indices of the weights prepared at compile time
    /// (`contraction::prepared`).
    pub prep: Vec<usize>,
    /// Options.
    pub opts: &'g CpuOptions,
    /// The values stored with padded planes ([`planes`]).
    pub planes: &'g planes::Planes,
    /// The values whose plane stride the lowering asked for
    /// ([`KCtx::plane_stride`]): a padded value of the kernel missing here
    /// was addressed as dense, which compiling refuses.
    pub strided: std::cell::RefCell<HashSet<ValueId>>,
}

impl KCtx<'_> {
    /// Floats from one `H x W` plane of rank-4 value `v` to the next: the
    /// padded stride when `v` is stored padded ([`planes`]), else `H·W`.
    /// Lowerings address the planes of the values a padded value can be
    /// through this, and only this marks the value as honoured.
    pub fn plane_stride(&self, v: ValueId) -> usize {
        self.strided.borrow_mut().insert(v);
        let shape = &self.g.value(v).ty.shape;
        self.planes
            .padded(v)
            .unwrap_or_else(|| shape.iter().skip(2).product())
    }

    /// Argument index of value `v`.
    pub fn arg(&self, v: ValueId) -> Result<usize, String> {
        self.arg_of
            .get(&v)
            .copied()
            .ok_or_else(|| format!("value `%{}` has no buffer", self.g.value(v).name))
    }

    /// The anchor node.
    pub fn anchor(&self) -> NodeId {
        self.k.anchor.unwrap_or(self.k.nodes[0])
    }
}

/// How errors name node `n`: its first result's name, or `#index` for a
/// node without results. Shared with the GPU backend.
pub(crate) fn node_label(g: &Graph, n: NodeId) -> String {
    g.node(n)
        .outputs
        .first()
        .map(|&v| g.value(v).name.clone())
        .unwrap_or_else(|| format!("#{}", n.index()))
}

fn unsupported(g: &Graph, n: NodeId, reason: impl Into<String>) -> CodegenError {
    CodegenError::Unsupported {
        node: node_label(g, n),
        op: g.node(n).op.name().to_string(),
        reason: reason.into(),
    }
}

/// The data of weight `v` (a `Param` or `Constant` result), checked
/// against the type the graph declares. Shared with the GPU backend.
pub(crate) fn weight(g: &Graph, v: ValueId) -> Result<std::borrow::Cow<'_, Tensor>, CodegenError> {
    let val = g.value(v);
    let t = g.weight(v).map_err(|e| CodegenError::Weight {
        name: val.name.clone(),
        message: e.to_string(),
    })?;
    if t.ty() != val.ty {
        return Err(CodegenError::Weight {
            name: val.name.clone(),
            message: format!("data is {}, but the graph declares {}", t.ty(), val.ty),
        });
    }
    Ok(t)
}

/// The result of `Shape { start, end }` node `n` as an i64 tensor: static
/// shapes make it a compile-time constant. Shared with the GPU backend.
pub(crate) fn shape_constant(g: &Graph, n: NodeId, start: i64, end: i64) -> Result<Tensor, String> {
    let x = &g.value(g.node(n).inputs[0]).ty.shape;
    let r = x.len() as i64;
    let clamp = |a: i64| if a < 0 { (a + r).max(0) } else { a.min(r) } as usize;
    let (s, e) = (clamp(start), clamp(end));
    let dims: Vec<i64> = x[s..e.max(s)].iter().map(|&d| d as i64).collect();
    Ok(Tensor::I64(
        ndarray::ArrayD::from_shape_vec(vec![dims.len()], dims)
            .map_err(|e| format!("shape result: {e}"))?,
    ))
}

/// Checks up front that every node has a lowering, so the error names the
/// first unsupported node rather than a half-built kernel.
fn check_supported(g: &Graph, k: &Kernel) -> Result<(), CodegenError> {
    for &n in &k.nodes {
        let op = &g.node(n).op;
        let ok = match k.kind {
            KernelKind::View => true,
            KernelKind::Elementwise => group::per_point(op),
            KernelKind::Contraction => {
                (n == k.nodes[0] && (contraction::supports(op) || extended::supports(op)))
                    || group::per_point(op)
            }
            KernelKind::Reduction => {
                (n == k.nodes[0] && reduce::supports(op)) || group::per_point(op)
            }
            KernelKind::DataMovement => movement::supports(op) || extended::supports(op),
        };
        if !ok {
            return Err(unsupported(g, n, "no lowering for this op yet"));
        }
    }
    Ok(())
}

/// Compiles `g` to native code for this machine.
///
/// Weights are copied into the executable, so `g` may be dropped after.
/// Every op must have a lowering; otherwise the error names the node.
pub fn compile_cpu(g: &Graph, opts: &CpuOptions) -> Result<Executable, CodegenError> {
    // A `DNNC_CPU_ISA` the kernels would ignore is an error for library
    // callers too, as it is for the CLI.
    dnnc_ir::isa::cap_from_env().map_err(|message| CodegenError::Backend {
        kernel: String::new(),
        message,
    })?;
    let relaid;
    let g = if opts.nchw_only || opts.conv_algo.is_some() || !opts.conv_algo_for.is_empty() {
        g
    } else {
        let mut b = g.clone();
        let bo = dnnc_passes::block_channels::BlockOptions {
            pools_and_concats: !opts.plain_pools,
        };
        dnnc_passes::block_channels::block_channels_with(&mut b, bo).map_err(|e| {
            CodegenError::Backend {
                kernel: String::new(),
                message: format!("block-channels: {e}"),
            }
        })?;
        relaid = b;
        &relaid
    };
    let kernels = group::absorb_prologues(g, group::kernels(g), |k| {
        contraction::takes_prologue(g, k, opts)
    });
    let kernels = group::absorb_concats(g, kernels, |k| contraction::takes_concat(g, k, opts));
    let kernels = if opts.unfused_blocks {
        kernels
    } else {
        let kernels = group::absorb_expansions(
            g,
            kernels,
            |k| blocked::takes_expansion(g, k),
            |k, p| blocked::expansion_pays(g, k, p),
        );
        let kernels = group::absorb_projections(g, kernels, |k| blocked::takes_projection(g, k));
        group::absorb_pools(g, kernels, |k, pool| {
            contraction::takes_pool(g, k, pool, opts)
        })
    };
    let kernels = group::order_for_locality(g, kernels);
    for k in &kernels {
        check_supported(g, k)?;
    }

    // Weights that every kernel reading them takes only in a prepared form
    // (packed, transformed) get no copy of their original data: it would
    // only add to the executable's memory.
    let mut superseded: HashMap<ValueId, bool> = HashMap::new();
    for k in &kernels {
        let sup = contraction::superseded_weight(g, k, opts);
        for &n in &k.nodes {
            for &v in &g.node(n).inputs {
                let e = superseded.entry(v).or_insert(true);
                *e &= sup == Some(v);
            }
        }
        // An expansion and a projection take their filters packed.
        for part in [&k.expansion, &k.projection] {
            let filter = part.first().map(|&n| g.node(n).inputs[1]);
            for &n in part {
                for &v in &g.node(n).inputs {
                    let e = superseded.entry(v).or_insert(true);
                    *e &= filter == Some(v);
                }
            }
        }
    }
    for &v in g.outputs() {
        superseded.insert(v, false);
    }

    // Buffers: sources, then concatenations built in place, then kernel
    // results in order.
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut vbuf: HashMap<ValueId, BufId> = HashMap::new();
    let mut inputs = Vec::new();
    // Which activations get padded planes depends on which Concats are
    // built in place, and a part's offset on its padding: the planes are
    // planned over every Concat that could be, then the Concats placed
    // with the parts' padded sizes (whole lines, so a padded Concat
    // always is).
    let concats: Vec<(ValueId, Vec<ValueId>)> = in_place_concats(g, &kernels, &|_| 0)
        .iter()
        .map(|c| (c.result, c.parts.iter().map(|&(v, _)| v).collect()))
        .collect();
    let routed = routed_splits(g, &kernels, &concats);
    let planes = planes::Planes::plan(g, &kernels, &concats, &routed, opts);
    let in_place = in_place_concats(g, &kernels, &|v| planes.bytes(g, v));
    // A Split is routed only into a Concat built in place with its part.
    let routed: Vec<planes::Routed> = routed
        .into_iter()
        .filter(|r| {
            let before: usize = r
                .parts
                .iter()
                .take_while(|&&v| v != r.part)
                .map(|&v| planes.bytes(g, v))
                .sum();
            before.is_multiple_of(dnnc_runtime::cpu::ALIGN)
                && in_place
                    .iter()
                    .any(|c| c.result == r.concat && c.parts.iter().any(|&(v, _)| v == r.part))
        })
        .collect();
    let views_of_split = in_place_splits(g, &kernels, &in_place, &routed, &|v| planes.bytes(g, v));
    for n in g.topo_order() {
        let node = g.node(n);
        let Some(&v) = node.outputs.first() else {
            continue;
        };
        let val = g.value(v);
        match node.op {
            Op::Input => {
                vbuf.insert(v, buffers.len());
                inputs.push((val.name.clone(), val.ty.clone(), buffers.len()));
                buffers.push(Buffer {
                    name: val.name.clone(),
                    bytes: val.ty.size_bytes(),
                    kind: BufferKind::Input {
                        name: val.name.clone(),
                    },
                });
            }
            Op::Param(_) | Op::Constant => {
                let t = weight(g, v)?;
                vbuf.insert(v, buffers.len());
                let data = if superseded.get(&v).copied().unwrap_or(false) {
                    AlignedBuf::zeroed(0)
                } else {
                    AlignedBuf::from_tensor(&t)
                };
                buffers.push(Buffer {
                    name: val.name.clone(),
                    bytes: data.len(),
                    kind: BufferKind::Weight(data),
                });
            }
            // Static shapes make Shape a compile-time constant.
            Op::Shape { start, end } => {
                let t = shape_constant(g, n, start, end).map_err(|m| unsupported(g, n, m))?;
                vbuf.insert(v, buffers.len());
                buffers.push(Buffer {
                    name: val.name.clone(),
                    bytes: val.ty.size_bytes(),
                    kind: BufferKind::Weight(AlignedBuf::from_tensor(&t)),
                });
            }
            _ => {}
        }
    }
    // A concatenation built in place: one buffer, created before its
    // parts' producers so their results can alias slices of it.
    // A routed Split's operand shares one buffer with the Concat, placed
    // so its Concat part is the Concat's slice and its other parts lie
    // before the Concat (the part opens it) or after it (closes it).
    let mut part_of: HashMap<ValueId, (BufId, usize)> = HashMap::new();
    for c in &in_place {
        let bytes = planes.bytes(g, c.result);
        let route = routed.iter().find(|r| r.concat == c.result).map(|r| {
            let x_bytes = planes.bytes(g, r.operand);
            let part_bytes = planes.bytes(g, r.part);
            let at = c
                .parts
                .iter()
                .find(|&&(v, _)| v == r.part)
                .map_or(0, |&(_, o)| o);
            if at == 0 {
                // (operand at, Concat at, shared bytes)
                let head = x_bytes - part_bytes;
                (r.operand, 0, head, head + bytes)
            } else {
                (r.operand, at, 0, bytes.max(at + x_bytes))
            }
        });
        let b = match route {
            Some((x, x_at, c_at, shared)) => {
                let e = buffers.len();
                buffers.push(Buffer {
                    name: format!("{} (with %{})", g.value(c.result).name, g.value(x).name),
                    bytes: shared,
                    kind: BufferKind::Temp,
                });
                part_of.insert(x, (e, x_at));
                buffers.push(Buffer {
                    name: g.value(c.result).name.clone(),
                    bytes,
                    kind: BufferKind::Alias {
                        of: e,
                        offset: c_at,
                    },
                });
                e + 1
            }
            None => {
                buffers.push(Buffer {
                    name: g.value(c.result).name.clone(),
                    bytes,
                    kind: BufferKind::Temp,
                });
                buffers.len() - 1
            }
        };
        vbuf.insert(c.result, b);
        for &(v, offset) in &c.parts {
            part_of.insert(v, (b, offset));
        }
    }
    for (ki, k) in kernels.iter().enumerate() {
        let anchor = k.anchor.unwrap_or(k.nodes[0]);
        if matches!(g.node(anchor).op, Op::Shape { .. }) || in_place.iter().any(|c| c.kernel == ki)
        {
            continue;
        }
        let split_views = views_of_split.iter().find(|s| s.kernel == ki);
        if let Some(sp) = split_views {
            let of = *vbuf
                .get(&sp.operand)
                .ok_or_else(|| unsupported(g, anchor, "operand has no buffer"))?;
            for &(v, offset) in &sp.parts {
                vbuf.insert(v, buffers.len());
                buffers.push(Buffer {
                    name: g.value(v).name.clone(),
                    bytes: g.value(v).ty.size_bytes(),
                    kind: BufferKind::Alias { of, offset },
                });
            }
        }
        if k.kind == KernelKind::View {
            let node = g.node(anchor);
            let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) else {
                return Err(unsupported(g, anchor, "view without operand or result"));
            };
            let of = *vbuf
                .get(&x)
                .ok_or_else(|| unsupported(g, anchor, "operand has no buffer"))?;
            vbuf.insert(y, buffers.len());
            buffers.push(Buffer {
                name: g.value(y).name.clone(),
                bytes: g.value(y).ty.size_bytes(),
                kind: BufferKind::Alias { of, offset: 0 },
            });
            continue;
        }
        for &v in &k.outputs {
            if split_views.is_some_and(|sp| sp.parts.iter().any(|&(p, _)| p == v)) {
                continue;
            }
            vbuf.insert(v, buffers.len());
            buffers.push(Buffer {
                name: g.value(v).name.clone(),
                bytes: planes.bytes(g, v),
                kind: match part_of.get(&v) {
                    Some(&(of, offset)) => BufferKind::Alias { of, offset },
                    None => BufferKind::Temp,
                },
            });
        }
    }

    // JIT setup.
    let mut flags = settings::builder();
    let set = |f: &mut settings::Builder, k: &str, v: &str| {
        f.set(k, v).map_err(|e| CodegenError::Backend {
            kernel: String::new(),
            message: format!("setting {k}={v}: {e}"),
        })
    };
    set(&mut flags, "opt_level", "speed")?;
    set(&mut flags, "use_colocated_libcalls", "false")?;
    set(&mut flags, "is_pic", "false")?;
    let backend = |m: String| CodegenError::Backend {
        kernel: String::new(),
        message: m,
    };
    let in_order_flags = {
        let mut f = flags.clone();
        set(&mut f, "opt_level", "none")?;
        settings::Flags::new(f)
    };
    let isa = host_isa_builder()
        .map_err(backend)?
        .finish(settings::Flags::new(flags))
        .map_err(|e| backend(e.to_string()))?;
    // The same target without the e-graph pass, for kernels that set
    // `Emit::in_order`.
    let in_order_isa = host_isa_builder()
        .map_err(backend)?
        .finish(in_order_flags)
        .map_err(|e| backend(e.to_string()))?;
    let mut jb = JITBuilder::with_isa(isa, default_libcall_names());
    for (name, p) in native::symbols() {
        jb.symbol(name, p);
    }
    let mut module = JITModule::new(jb);
    let ptr = module.target_config().pointer_type();

    // The native helpers generated code calls (`native::symbols`); all
    // but `dnnc_sgemm` return an i32 status.
    let mut import = |name: &str, params: &[cranelift_codegen::ir::Type], status: bool| {
        let mut sg = module.make_signature();
        sg.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        if status {
            sg.returns.push(AbiParam::new(I32));
        }
        module
            .declare_function(name, Linkage::Import, &sg)
            .map_err(|e| backend(e.to_string()))
    };
    let sgemm_id = import(
        "dnnc_sgemm",
        &[
            I64, I64, I64, ptr, I64, I64, ptr, I64, I64, ptr, I64, I64, F32, F32,
        ],
        false,
    )?;
    let psgemm_id = import(
        "dnnc_sgemm_packed",
        &[ptr, I64, I64, I64, ptr, I64, I64, ptr, I64, I64, I64],
        true,
    )?;
    let gsgemm_id = import(
        "dnnc_sgemm_packed_gather",
        &[ptr, I64, I64, I64, ptr, ptr, I64, I64, I64],
        true,
    )?;
    let bsgemm_id = import(
        "dnnc_sgemm_packed_batch",
        &[
            ptr, I64, I64, I64, I64, ptr, I64, I64, I64, ptr, I64, I64, I64, I64,
        ],
        true,
    )?;
    let conv8c_id = import(
        "dnnc_conv1x1_nchw8c",
        &[ptr, I64, I64, ptr, ptr, I64, I64, I64, I64, I64, ptr],
        true,
    )?;
    let conv8c_band_id = import(
        "dnnc_conv1x1_nchw8c_band",
        &[ptr, I64, I64, ptr, I64, I64, I64, ptr, I64, ptr],
        true,
    )?;
    // (w, x, y, geometry, u0, u1, epilogue).
    let unit_conv = [ptr, ptr, ptr, ptr, I64, I64, ptr];
    let group8_id = import("dnnc_conv_group8", &unit_conv, true)?;
    let dw8_id = import("dnnc_conv_dw8", &unit_conv, true)?;
    let into8c_id = import("dnnc_conv_into_nchw8c", &unit_conv, true)?;
    let gather8c_id = import(
        "dnnc_conv_gather_nchw8c",
        &[ptr, ptr, ptr, ptr, I64, I64, I64, I64, ptr],
        true,
    )?;
    // (w, ring, slots, y, geometry, row, epilogue).
    let group_ring8c_id = import(
        "dnnc_conv_group_ring_nchw8c",
        &[ptr, ptr, ptr, ptr, ptr, I64, ptr],
        true,
    )?;
    let dw_rows = [ptr, ptr, ptr, ptr, ptr, ptr, I64, I64];
    let dw8c_row_id = import("dnnc_dw_row_nchw8c", &dw_rows, true)?;
    let dw8c_id = import("dnnc_dw_nchw8c", &dw_rows, true)?;
    let pool_rows = [ptr, ptr, I64, I64, I64, I64, I64, I64];
    let maxpool_id = import("dnnc_max_pool_3x3s2", &pool_rows, true)?;
    let maxpool1_id = import("dnnc_max_pool_3x3s1", &pool_rows, true)?;
    let wino4_out_id = import(
        "dnnc_winograd4_out_row",
        &[ptr, I64, I64, ptr, I64, I64, ptr, F32, F32, F32],
        true,
    )?;
    let wino4_in_id = import("dnnc_winograd4_in_row", &[ptr, I64, I64, ptr, I64], true)?;
    let unblock_id = import(
        "dnnc_unblock_rows",
        &[ptr, I64, I64, I64, ptr, I64, I64],
        true,
    )?;
    let block_rows_id = import(
        "dnnc_block_rows",
        &[ptr, I64, I64, I64, I64, ptr, I64, ptr, ptr, F32, F32],
        true,
    )?;
    let pool8c_id = import("dnnc_pool_nchw8c", &[ptr, ptr, ptr, I64, I64], true)?;

    // The kernel ABI: (args, task, tasks) -> i32 (`dnnc_runtime::cpu`).
    let mut ksig = module.make_signature();
    ksig.params.push(AbiParam::new(ptr));
    ksig.params.push(AbiParam::new(I64));
    ksig.params.push(AbiParam::new(I64));
    ksig.params.push(AbiParam::new(I64));
    ksig.returns.push(AbiParam::new(I32));

    let mut ctx = module.make_context();
    let mut fctx = FunctionBuilderContext::new();
    let mut pending: Vec<(cranelift_module::FuncId, Step)> = Vec::new();
    let mut code_sizes: HashMap<cranelift_module::FuncId, usize> = HashMap::new();
    for (ki, k) in kernels.iter().enumerate() {
        let anchor = k.anchor.unwrap_or(k.nodes[0]);
        if k.kind == KernelKind::View
            || matches!(g.node(anchor).op, Op::Shape { .. })
            || in_place.iter().any(|c| c.kernel == ki)
            || views_of_split
                .iter()
                .any(|s| s.kernel == ki && s.parts.len() == k.outputs.len())
        {
            continue;
        }
        // Arguments: inputs, outputs, workspaces; a Split's results that
        // view its operand are none (the kernel copies the others).
        let views: Vec<ValueId> = views_of_split
            .iter()
            .filter(|s| s.kernel == ki)
            .flat_map(|s| s.parts.iter().map(|&(v, _)| v))
            .collect();
        let mut args: Vec<BufId> = Vec::new();
        let mut arg_of: HashMap<ValueId, usize> = HashMap::new();
        for &v in k.inputs.iter().chain(&k.outputs) {
            if arg_of.contains_key(&v) || views.contains(&v) {
                continue;
            }
            let b = *vbuf.get(&v).ok_or_else(|| {
                unsupported(g, anchor, format!("`%{}` has no buffer", g.value(v).name))
            })?;
            arg_of.insert(v, args.len());
            args.push(b);
        }
        let ws_bytes = match extended::workspaces(g, k) {
            Some(ws) => ws,
            None => contraction::workspaces(g, k, opts),
        }
        .map_err(|m| unsupported(g, anchor, m))?;
        let mut ws = Vec::new();
        for (i, bytes) in ws_bytes.into_iter().enumerate() {
            ws.push(args.len());
            args.push(buffers.len());
            buffers.push(Buffer {
                name: format!("{}:ws{i}", k.name),
                bytes,
                kind: BufferKind::Temp,
            });
        }
        let mut prep = Vec::new();
        let prepared = contraction::prepared(g, k, opts).map_err(|m| unsupported(g, anchor, m))?;
        for (i, buf) in prepared.into_iter().enumerate() {
            prep.push(args.len());
            args.push(buffers.len());
            buffers.push(Buffer {
                name: format!("{}:prep{i}", k.name),
                bytes: buf.len(),
                kind: BufferKind::Weight(buf),
            });
        }
        let kctx = KCtx {
            g,
            k,
            arg_of,
            ws,
            prep,
            opts,
            planes: &planes,
            strided: Default::default(),
        };

        ctx.func.signature = ksig.clone();
        ctx.func.name = UserFuncName::user(0, ki as u32);
        let fid = module
            .declare_function(&format!("k{ki}"), Linkage::Local, &ksig)
            .map_err(|e| backend(e.to_string()))?;
        let in_order;
        {
            let sgemm = module.declare_func_in_func(sgemm_id, &mut ctx.func);
            let psgemm = module.declare_func_in_func(psgemm_id, &mut ctx.func);
            let bsgemm = module.declare_func_in_func(bsgemm_id, &mut ctx.func);
            let gsgemm = module.declare_func_in_func(gsgemm_id, &mut ctx.func);
            let conv8c = module.declare_func_in_func(conv8c_id, &mut ctx.func);
            let conv8c_band = module.declare_func_in_func(conv8c_band_id, &mut ctx.func);
            let group8 = module.declare_func_in_func(group8_id, &mut ctx.func);
            let dw8 = module.declare_func_in_func(dw8_id, &mut ctx.func);
            let into8c = module.declare_func_in_func(into8c_id, &mut ctx.func);
            let gather8c = module.declare_func_in_func(gather8c_id, &mut ctx.func);
            let group_ring8c = module.declare_func_in_func(group_ring8c_id, &mut ctx.func);
            let dw8c_row = module.declare_func_in_func(dw8c_row_id, &mut ctx.func);
            let dw8c = module.declare_func_in_func(dw8c_id, &mut ctx.func);
            let maxpool = module.declare_func_in_func(maxpool_id, &mut ctx.func);
            let maxpool1 = module.declare_func_in_func(maxpool1_id, &mut ctx.func);
            let wino4_out = module.declare_func_in_func(wino4_out_id, &mut ctx.func);
            let wino4_in = module.declare_func_in_func(wino4_in_id, &mut ctx.func);
            let unblock = module.declare_func_in_func(unblock_id, &mut ctx.func);
            let block_rows = module.declare_func_in_func(block_rows_id, &mut ctx.func);
            let pool8c = module.declare_func_in_func(pool8c_id, &mut ctx.func);
            let mut b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
            let entry = b.create_block();
            b.append_block_params_for_function_params(entry);
            b.switch_to_block(entry);
            let argp = b.block_params(entry)[0];
            let (task, tasks) = (b.block_params(entry)[1], b.block_params(entry)[2]);
            let phase = b.block_params(entry)[3];
            let mut bufs = Vec::with_capacity(args.len());
            for i in 0..args.len() {
                bufs.push(b.ins().load(ptr, emit::mem(), argp, (i * 8) as i32));
            }
            let fail = b.create_block();
            b.append_block_param(fail, I32);
            let mut e = Emit {
                b,
                bufs,
                sgemm,
                psgemm,
                bsgemm,
                gsgemm,
                conv8c,
                conv8c_band,
                group8,
                dw8,
                into8c,
                gather8c,
                group_ring8c,
                dw8c_row,
                dw8c,
                maxpool,
                maxpool1,
                wino4_out,
                wino4_in,
                unblock,
                block_rows,
                pool8c,
                fail,
                cfg: module.target_config(),
                task,
                tasks,
                split: None,
                split_unit: None,
                phase_units: Vec::new(),
                phase,
                phases: Vec::new(),
                task_ws: Vec::new(),
                in_order: false,
                hoist: None,
            };
            let lowered = match k.kind {
                _ if extended::supports(&g.node(anchor).op) => extended::lower(&mut e, &kctx),
                KernelKind::Contraction => contraction::lower(&mut e, &kctx),
                KernelKind::Elementwise => lower_elementwise(&mut e, &kctx),
                KernelKind::Reduction => reduce::lower(&mut e, &kctx),
                KernelKind::DataMovement => movement::lower(&mut e, &kctx),
                KernelKind::View => Ok(Vec::new()),
            };
            let errors = lowered.map_err(|m| unsupported(g, anchor, m))?;
            if let Some(&v) = k
                .inputs
                .iter()
                .chain(&k.outputs)
                .find(|&&v| planes.padded(v).is_some() && !kctx.strided.borrow().contains(&v))
            {
                return Err(unsupported(
                    g,
                    anchor,
                    format!(
                        "`%{}` is stored with padded planes, which this lowering does not address",
                        g.value(v).name
                    ),
                ));
            }
            let zero = e.b.ins().iconst(I32, 0);
            e.b.ins().return_(&[zero]);
            e.b.switch_to_block(fail);
            let code = e.b.block_params(fail)[0];
            e.b.ins().return_(&[code]);
            e.b.seal_all_blocks();
            let cfg = e.cfg;
            let (split, phase_splits) = match e.phases.split_first() {
                Some((&first, rest)) => (first, rest.to_vec()),
                None => (e.split.map_or(1, |(n, _)| n), Vec::new()),
            };
            let split_units: Vec<String> = if e.phase_units.is_empty() {
                e.split_unit.iter().map(|u| u.to_string()).collect()
            } else {
                e.phase_units.iter().map(|u| u.to_string()).collect()
            };
            let task_ws = std::mem::take(&mut e.task_ws);
            in_order = e.in_order;
            e.b.finalize(cfg);
            let ops: Vec<&str> = k.all_nodes().map(|&n| g.node(n).op.name()).collect();
            let inplace = inplace_pairs(g, k, &kctx.arg_of);
            let algo = contraction::algo_of(g, k, opts).map(|a| format!("{a:?}").to_lowercase());
            let (work, split_work) = cost::kernel_work(g, k, opts);
            // A kernel that shares its units out as tasks runs its GEMMs
            // on one thread per task; they do not split again.
            let split_work = if split > 1 || !phase_splits.is_empty() {
                0
            } else {
                split_work
            };
            let mut writes: Vec<usize> = k
                .outputs
                .iter()
                .filter_map(|v| kctx.arg_of.get(v).copied())
                .collect();
            writes.extend(&kctx.ws);
            pending.push((
                fid,
                Step {
                    name: k.name.clone(),
                    op: ops.join("+"),
                    func: dummy_kernel,
                    args,
                    errors,
                    nodes: k.all_nodes().map(|&n| node_label(g, n)).collect(),
                    algo,
                    inplace,
                    writes,
                    work,
                    split_work,
                    split,
                    phase_splits,
                    split_units,
                    task_ws,
                },
            ));
        }
        let asm_dir = std::env::var_os("DNNC_DUMP_ASM");
        ctx.set_disasm(asm_dir.is_some());
        let defined = if in_order {
            define_in_order(&mut module, &*in_order_isa, fid, &mut ctx)
        } else {
            module
                .define_function(fid, &mut ctx)
                .map_err(|e| format!("{e:?}"))
        };
        defined.map_err(|message| CodegenError::Backend {
            kernel: k.name.clone(),
            message,
        })?;
        if let Some(code) = ctx.compiled_code() {
            code_sizes.insert(fid, code.code_buffer().len());
            if let (Some(dir), Some(text)) = (&asm_dir, &code.vcode) {
                write_asm(dir, &k.name, text);
            }
        }
        module.clear_context(&mut ctx);
    }
    let mut perf_map: Vec<(usize, usize, String)> = Vec::new();
    module
        .finalize_definitions()
        .map_err(|e| backend(e.to_string()))?;
    let mut steps = Vec::with_capacity(pending.len());
    for (fid, mut s) in pending {
        let p = module.get_finalized_function(fid);
        // SAFETY: the function was generated with exactly the KernelFn
        // signature (a pointer and two i64 arguments, i32 result,
        // platform ABI).
        s.func = unsafe { std::mem::transmute::<*const u8, KernelFn>(p) };
        perf_map.push((
            p as usize,
            code_sizes.get(&fid).copied().unwrap_or(0),
            s.name.clone(),
        ));
        steps.push(s);
    }
    write_perf_map(&perf_map);

    let mut outputs = Vec::new();
    for &v in g.outputs() {
        let buf = *vbuf.get(&v).ok_or_else(|| CodegenError::Unsupported {
            node: g.value(v).name.clone(),
            op: g.node(g.value(v).producer).op.name().into(),
            reason: "graph output has no buffer".into(),
        })?;
        outputs.push(OutputSpec {
            name: g.value(v).name.clone(),
            buf,
            ty: g.value(v).ty.clone(),
        });
    }
    let mut exe = Executable::new(
        g.name.clone(),
        inputs,
        outputs,
        buffers,
        steps,
        Arc::new(JitCode(Mutex::new(Some(module)))),
        Box::new(GreedyPlanner),
    );
    if let PartitionModel::Calibrated(profile) = &opts.partition {
        let profile = profile.clone().unwrap_or_default();
        let model = partition::CalibratedCost::new(g, &exe, &profile);
        exe.set_cost_model(Some(Arc::new(model)));
    }
    Ok(exe)
}

/// Argument pairs `(input, output)` a kernel may run in place: an
/// elementwise kernel's operands of the loop domain's shape and dtype
/// (every operand walks them with identical strides and each point loads
/// all its inputs before storing, see `elementwise::emit`), a blocked
/// pointwise conv's fused residual (`blocked::residual_in_place`). Other
/// kernels write outputs (GEMM results, reductions) before their inputs
/// are fully read.
fn inplace_pairs(g: &Graph, k: &Kernel, arg_of: &HashMap<ValueId, usize>) -> Vec<(usize, usize)> {
    if k.kind == KernelKind::Contraction {
        let res = blocked::residual_in_place(g, k);
        return res
            .and_then(|r| Some((*arg_of.get(&r)?, *arg_of.get(k.outputs.first()?)?)))
            .into_iter()
            .collect();
    }
    let lowered_elsewhere = k
        .anchor
        .or(k.nodes.first().copied())
        .is_some_and(|n| extended::supports(&g.node(n).op));
    if k.kind != KernelKind::Elementwise || lowered_elsewhere {
        return Vec::new();
    }
    let Some(domain) = k
        .nodes
        .last()
        .and_then(|&n| g.node(n).outputs.first())
        .map(|&v| &g.value(v).ty)
    else {
        return Vec::new();
    };
    let mut pairs = Vec::new();
    for &o in &k.outputs {
        if g.value(o).ty != *domain {
            continue;
        }
        for &i in &k.inputs {
            if g.value(i).ty == *domain && !k.outputs.contains(&i) {
                if let (Some(&ia), Some(&oa)) = (arg_of.get(&i), arg_of.get(&o)) {
                    pairs.push((ia, oa));
                }
            }
        }
    }
    pairs
}

/// A Concat whose parts are written straight into their slices of its
/// result, so it costs no kernel and no copy.
struct InPlaceConcat {
    /// Index of the Concat's kernel (generated as nothing).
    kernel: usize,
    /// The concatenation.
    result: ValueId,
    /// Each part and its byte offset in the result.
    parts: Vec<(ValueId, usize)>,
}

/// The Concat kernels that can be built in place: along an axis with only
/// size-1 axes before it (each part is then one contiguous block of the
/// result, at an offset that keeps the 64-byte buffer alignment), every
/// part a distinct value that a generated (not view) kernel writes as a
/// fresh result, is no graph output and is not part of another in-place
/// Concat. Steps writing disjoint slices of one buffer do not depend on
/// each other (the runtime's schedule compares byte ranges), so branches
/// feeding a Concat may still run concurrently. `bytes` sizes a value's
/// buffer (its planes may be padded, `planes`); offsets are aligned by
/// those sizes.
fn in_place_concats(
    g: &Graph,
    kernels: &[Kernel],
    bytes: &dyn Fn(ValueId) -> usize,
) -> Vec<InPlaceConcat> {
    let mut written_by: HashMap<ValueId, usize> = HashMap::new();
    for (ki, k) in kernels.iter().enumerate() {
        let anchor = k.anchor.unwrap_or(k.nodes[0]);
        if k.kind == KernelKind::View || matches!(g.node(anchor).op, Op::Shape { .. }) {
            continue;
        }
        for &v in &k.outputs {
            written_by.insert(v, ki);
        }
    }
    let outputs: std::collections::HashSet<ValueId> = g.outputs().iter().copied().collect();
    let mut claimed: std::collections::HashSet<ValueId> = std::collections::HashSet::new();
    let mut found = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        let [n] = k.nodes[..] else {
            continue;
        };
        let node = g.node(n);
        let (Op::Concat { axis }, [result]) = (&node.op, &node.outputs[..]) else {
            continue;
        };
        if !dnnc_ir::infer::contiguous_pieces(&g.value(*result).ty.shape, *axis) {
            continue;
        }
        let mut parts = Vec::new();
        let mut offset = 0usize;
        let mut ok = node.inputs.len() >= 2;
        for &v in &node.inputs {
            let fresh = written_by.get(&v).is_some_and(|&w| w != ki);
            if !fresh
                || outputs.contains(&v)
                || claimed.contains(&v)
                || parts.iter().any(|&(p, _)| p == v)
                || !offset.is_multiple_of(dnnc_runtime::cpu::ALIGN)
            {
                ok = false;
                break;
            }
            parts.push((v, offset));
            offset += bytes(v);
        }
        if !ok || offset != bytes(*result) {
            continue;
        }
        claimed.extend(parts.iter().map(|&(v, _)| v));
        // Generated as nothing, so it cannot be a part of a later one.
        written_by.remove(result);
        found.push(InPlaceConcat {
            kernel: ki,
            result: *result,
            parts,
        });
    }
    found
}

/// A Split whose results are views of slices of its operand, so they
/// cost no copy (the mirror of [`InPlaceConcat`]; merged branches end in
/// one). Results that cannot be views are still copied by the Split's
/// kernel, which then writes only those.
struct InPlaceSplit {
    /// Index of the Split's kernel (generated as nothing when every
    /// result is a view).
    kernel: usize,
    /// The operand.
    operand: ValueId,
    /// Each result that views the operand, and its byte offset in it.
    parts: Vec<(ValueId, usize)>,
}

/// The Splits with results that can view their operand: along an axis
/// with only size-1 axes before it (each result is then one contiguous
/// block). A result is a view when its offset keeps the 64-byte buffer
/// alignment and it is no graph output and no part of an in-place
/// Concat (whose producer must write it into the Concat's buffer: the
/// Split's kernel copies it there).
fn in_place_splits(
    g: &Graph,
    kernels: &[Kernel],
    concats: &[InPlaceConcat],
    routed: &[planes::Routed],
    bytes: &dyn Fn(ValueId) -> usize,
) -> Vec<InPlaceSplit> {
    let outputs: std::collections::HashSet<ValueId> = g.outputs().iter().copied().collect();
    let concat_parts: std::collections::HashSet<ValueId> = concats
        .iter()
        .flat_map(|c| c.parts.iter().map(|&(v, _)| v))
        .collect();
    let mut found = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        let [n] = k.nodes[..] else {
            continue;
        };
        let node = g.node(n);
        if let Some(view) = slice_view(g, ki, n, &outputs, &concat_parts) {
            found.push(view);
            continue;
        }
        let (Op::Split { axis, .. }, [x]) = (&node.op, &node.inputs[..]) else {
            continue;
        };
        if !dnnc_ir::infer::contiguous_pieces(&g.value(*x).ty.shape, *axis) {
            continue;
        }
        let routed_part = routed.iter().find(|r| r.kernel == ki).map(|r| r.part);
        let mut parts = Vec::new();
        let mut offset = 0usize;
        for &v in &node.outputs {
            if !outputs.contains(&v)
                && (!concat_parts.contains(&v) || routed_part == Some(v))
                && offset.is_multiple_of(dnnc_runtime::cpu::ALIGN)
            {
                parts.push((v, offset));
            }
            offset += bytes(v);
        }
        if !parts.is_empty() && offset == bytes(*x) {
            found.push(InPlaceSplit {
                kernel: ki,
                operand: *x,
                parts,
            });
        }
    }
    found
}

/// The Splits that can be routed into an in-place Concat candidate
/// (`concats`: each result and its parts): along an axis with only size-1
/// axes before it, exactly one result a part of the Concat, its first
/// operand and the Split's last result or its last operand and the
/// Split's first (`split-order` arranges this for merged convs), every
/// other result no graph output and no Concat part, and the operand a
/// fresh result of a generated kernel that writes nothing else, read by
/// the Split alone, no graph output and no Concat part itself; one such
/// Split a Concat (the first in kernel order). The
/// operand's buffer is then placed so the part is the Concat's slice and
/// the other parts lie outside the Concat: no copy, and every result a
/// view.
fn routed_splits(
    g: &Graph,
    kernels: &[Kernel],
    concats: &[(ValueId, Vec<ValueId>)],
) -> Vec<planes::Routed> {
    let outputs: std::collections::HashSet<ValueId> = g.outputs().iter().copied().collect();
    let concat_of = |v: ValueId| concats.iter().find(|(_, parts)| parts.contains(&v));
    let mut found = Vec::new();
    for (ki, k) in kernels.iter().enumerate() {
        let [n] = k.nodes[..] else {
            continue;
        };
        let node = g.node(n);
        let (Op::Split { axis, .. }, [x]) = (&node.op, &node.inputs[..]) else {
            continue;
        };
        let parts = &node.outputs;
        if !dnnc_ir::infer::contiguous_pieces(&g.value(*x).ty.shape, *axis)
            || parts.len() < 2
            || outputs.contains(x)
            || concat_of(*x).is_some()
            || parts.iter().any(|v| outputs.contains(v))
        {
            continue;
        }
        let in_concat: Vec<usize> = (0..parts.len())
            .filter(|&i| concat_of(parts[i]).is_some())
            .collect();
        let [i] = in_concat[..] else {
            continue;
        };
        let Some((concat, cparts)) = concat_of(parts[i]) else {
            continue;
        };
        let opens = cparts.first() == Some(&parts[i]) && i + 1 == parts.len();
        let closes = cparts.last() == Some(&parts[i]) && i == 0;
        let writer = kernels
            .iter()
            .enumerate()
            .find(|(_, w)| w.outputs.contains(x));
        let fresh = writer.is_some_and(|(wi, w)| {
            wi != ki
                && w.kind != KernelKind::View
                && w.outputs == [*x]
                && !matches!(g.node(w.anchor.unwrap_or(w.nodes[0])).op, Op::Shape { .. })
        });
        let read_once = kernels
            .iter()
            .enumerate()
            .all(|(ri, r)| ri == ki || !r.inputs.contains(x));
        // One route a Concat: its buffer is placed against one operand.
        let taken = found.iter().any(|r: &planes::Routed| r.concat == *concat);
        if (opens || closes) && fresh && read_once && !taken {
            found.push(planes::Routed {
                kernel: ki,
                operand: *x,
                parts: parts.clone(),
                concat: *concat,
                part: parts[i],
            });
        }
    }
    found
}

/// A Slice (node `n`, kernel `ki`) whose result is one contiguous block
/// of its operand at a 64-byte aligned offset, and no graph output or
/// in-place Concat part, as a view: every axis before the last sliced
/// one keeps one index, the last sliced one a step-1 range, and every
/// later one all of it (ShuffleNet-V2's channel halves at batch 1).
fn slice_view(
    g: &Graph,
    ki: usize,
    n: dnnc_ir::NodeId,
    outputs: &std::collections::HashSet<ValueId>,
    concat_parts: &std::collections::HashSet<ValueId>,
) -> Option<InPlaceSplit> {
    let node = g.node(n);
    let (
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        },
        [x, ..],
        [y],
    ) = (&node.op, &node.inputs[..], &node.outputs[..])
    else {
        return None;
    };
    if outputs.contains(y) || concat_parts.contains(y) {
        return None;
    }
    let xs = &g.value(*x).ty.shape;
    // (start, step, len) per axis; unsliced axes whole.
    let mut r: Vec<(i64, i64, usize)> = xs.iter().map(|&d| (0, 1, d)).collect();
    for (i, &a) in axes.iter().enumerate() {
        let ax = dnnc_ir::infer::norm_axis(a, xs.len()).ok()?;
        let step = steps.get(i).copied().unwrap_or(1);
        r[ax] = dnnc_ir::infer::slice_range(xs[ax], *starts.get(i)?, *ends.get(i)?, step);
    }
    let last = (0..xs.len()).rev().find(|&a| r[a].2 != xs[a]).unwrap_or(0);
    let whole_after = (last + 1..xs.len()).all(|a| r[a].1 == 1 || xs[a] <= 1);
    let one_before = (0..last).all(|a| r[a].2 == 1);
    let step_one = r.get(last).is_none_or(|&(_, st, len)| st == 1 || len <= 1);
    if !(whole_after && one_before && step_one) || r.iter().any(|&(_, _, len)| len == 0) {
        return None;
    }
    let elem = g.value(*x).ty.dtype.size_bytes();
    let mut stride = elem;
    let mut offset = 0usize;
    for a in (0..xs.len()).rev() {
        offset += r[a].0 as usize * stride;
        stride *= xs[a];
    }
    offset
        .is_multiple_of(dnnc_runtime::cpu::ALIGN)
        .then(|| InPlaceSplit {
            kernel: ki,
            operand: *x,
            parts: vec![(*y, offset)],
        })
}

/// Placeholder until the real pointer is known after finalisation.
unsafe extern "C" fn dummy_kernel(_: *const *mut u8, _: usize, _: usize, _: usize) -> i32 {
    1
}

/// An elementwise kernel: every node evaluated per point of the output.
fn lower_elementwise(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    let last = *c.k.nodes.last().ok_or("empty kernel")?;
    let domain =
        c.g.node(last)
            .outputs
            .first()
            .map(|&v| c.g.value(v).ty.shape.clone())
            .ok_or("node without result")?;
    let spec = elementwise::spec_for(
        c.g,
        &domain,
        &c.k.nodes,
        &c.arg_of,
        Vec::new(),
        &c.k.outputs,
    )?;
    // Splits across tasks over the leading axes (the kernel ABI's task
    // range): every point is computed by the same code whatever the split.
    elementwise::emit_split(e, &spec, elementwise::split_prefix(&domain))?;
    let int_div = c.k.nodes.iter().any(|&n| {
        matches!(c.g.node(n).op, Op::Binary(dnnc_ir::op::Binary::Div))
            && c.g.value(c.g.node(n).outputs[0]).ty.dtype == DType::I64
    });
    Ok(if int_div {
        vec!["integer division by zero".into()]
    } else {
        Vec::new()
    })
}

/// Compiles `ctx` with `isa` (the module's target without the e-graph
/// pass, see [`emit::Emit::in_order`]) and hands the machine code and its
/// relocations to the module, as `define_function` does with the module's
/// own ISA.
fn define_in_order(
    module: &mut JITModule,
    isa: &dyn cranelift_codegen::isa::TargetIsa,
    fid: cranelift_module::FuncId,
    ctx: &mut cranelift_codegen::Context,
) -> Result<(), String> {
    let mut plane = cranelift_codegen::control::ControlPlane::default();
    let align = ctx
        .compile(isa, &mut plane)
        .map_err(|e| format!("{:?}", e.inner))?
        .buffer
        .alignment as u64;
    let code = ctx.compiled_code().expect("just compiled");
    let align = align
        .max(isa.function_alignment().minimum as u64)
        .max(isa.symbol_alignment());
    let relocs: Vec<cranelift_module::ModuleReloc> = code
        .buffer
        .relocs()
        .iter()
        .map(|r| cranelift_module::ModuleReloc::from_mach_reloc(r, &ctx.func, fid))
        .collect();
    let bytes = code.code_buffer().to_vec();
    module
        .define_function_bytes(fid, align, &bytes, &relocs)
        .map_err(|e| format!("{e:?}"))
}

/// With `DNNC_DUMP_ASM=DIR` set, writes each kernel's machine code as
/// `DIR/<kernel>.s`, so a slow kernel's instruction mix (spills, loads per
/// FMA) can be read. Failures to write are ignored: a debugging aid only.
fn write_asm(dir: &std::ffi::OsStr, kernel: &str, text: &str) {
    let name: String = kernel
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = std::path::Path::new(dir);
    let _ = std::fs::create_dir_all(dir);
    let _ = std::fs::write(dir.join(format!("{name}.s")), text);
}

/// With `DNNC_PERF_MAP` set, appends each kernel's address range and name
/// to `/tmp/perf-<pid>.map` (the format `perf report` reads for JIT code),
/// so profilers attribute samples to kernels instead of raw addresses.
/// Failures to write are ignored: the map is a debugging aid only.
fn write_perf_map(entries: &[(usize, usize, String)]) {
    if std::env::var_os("DNNC_PERF_MAP").is_none() {
        return;
    }
    use std::io::Write as _;
    let path = format!("/tmp/perf-{}.map", std::process::id());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        for (addr, size, name) in entries {
            let _ = writeln!(f, "{addr:x} {size:x} dnnc_kernel:{name}");
        }
    }
}

/// Cranelift's builder for this host, without the AVX-512 encodings when
/// `DNNC_CPU_ISA` caps dnnc below AVX-512 ([`dnnc_ir::isa`]), so the
/// generated code is what an AVX2 machine would run.
fn host_isa_builder() -> Result<cranelift_codegen::isa::Builder, String> {
    use cranelift_codegen::settings::Configurable;
    let mut b = cranelift_native::builder().map_err(|m| format!("host not supported: {m}"))?;
    if cfg!(target_arch = "x86_64") && dnnc_ir::isa::cpu_isa() < dnnc_ir::isa::CpuIsa::Avx512 {
        for flag in [
            "has_avx512bitalg",
            "has_avx512dq",
            "has_avx512f",
            "has_avx512vl",
            "has_avx512vbmi",
            "has_avx512vnni",
        ] {
            b.set(flag, "false").map_err(|e| format!("{flag}: {e}"))?;
        }
    }
    Ok(b)
}
