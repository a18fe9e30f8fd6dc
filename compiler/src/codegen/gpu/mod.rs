//! The GPU code generator: one WGSL compute shader (or a few stages) per
//! fused kernel, validated by naga, run by `dnnc_runtime::gpu`.
//!
//! Everything above code generation is the CPU backend's: the same fusion
//! overlay (`cpu::group::kernels`), the same liveness planner for the
//! activation arena (`dnnc_ir::memplan`), the same weights. Only the
//! emitter differs. Lowerings by kernel kind:
//!
//! - elementwise chains (`elementwise`): one invocation per output
//!   element, operands broadcast by index arithmetic;
//! - contractions (`contraction`): MatMul, Gemm and Conv2d as a tiled
//!   GEMM with workgroup shared memory and register blocking (convolution
//!   as implicit GEMM: the im2col matrix is never built), depthwise and
//!   grouped convolution directly, Winograd F(2x2,3x3) as input transform,
//!   batched GEMM and output transform; the fused epilogue runs on each
//!   output element before it is stored;
//! - reductions (`reduce`): pools per output element, Reduce*,
//!   global pools, Softmax and the normalisations as log-depth workgroup
//!   tree reductions;
//! - data movement (`movement`): one invocation per output element
//!   reading its source element;
//! - views alias their operand (no shader).
//!
//! Workgroup sizes and GEMM tiles come from the device's limits
//! ([`GpuLimits`]) and each GEMM's shape; every shader is validated with
//! naga before the program is returned, so the driver never sees one that
//! is not valid WGSL.

mod contraction;
mod elementwise;
mod extended;
mod movement;
pub(crate) mod point;
mod reduce;
pub(crate) mod wgsl;
mod winograd;

use super::cpu::group::{self, Kernel, KernelKind};
use super::cpu::{node_label, shape_constant, weight, CodegenError};
use dnnc_ir::{memplan, DType, Graph, NodeId, Op, Tensor, ValueId};
use dnnc_runtime::gpu::{tensor_words, GpuIo, GpuKernel, GpuLimits, GpuProgram, GpuStage};
use std::collections::HashMap;
use wgsl::{Buf, Loc};

/// Options of the GPU code generator.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// The limits of the device the shaders are for (`Default`: WebGPU's
    /// guaranteed minimums, valid on every adapter).
    pub limits: GpuLimits,
    /// Whether 3x3 stride-1 convolutions may use Winograd F(2x2,3x3)
    /// (`None`: when it pays by the operation count; `Some(false)`:
    /// never; `Some(true)`: wherever it applies, for tests).
    pub winograd: Option<bool>,
}

/// Per-kernel facts the lowerings use.
pub(crate) struct GCtx<'a> {
    /// The graph.
    pub g: &'a Graph,
    /// The kernel being lowered.
    pub k: &'a Kernel,
    /// Options (limits).
    pub opts: &'a GpuOptions,
    locs: &'a HashMap<ValueId, Loc>,
    scratch_base: usize,
    scratch_used: usize,
    /// The weight buffer, which lowerings may extend with data prepared
    /// at compile time (Winograd-transformed filters).
    weights: &'a mut Vec<u32>,
    /// Messages of the run-time error codes raised so far.
    errors: &'a mut Vec<String>,
    /// Arena word of the error flag.
    error_word: usize,
    /// The convolution algorithm the lowering chose, for profiles.
    pub algo: Option<&'static str>,
}

impl GCtx<'_> {
    /// Where `v` lives.
    pub fn loc(&self, v: ValueId) -> Result<Loc, String> {
        self.locs
            .get(&v)
            .copied()
            .ok_or_else(|| format!("value `%{}` has no buffer", self.g.value(v).name))
    }

    /// A closure form of [`GCtx::loc`] for the point evaluator.
    pub fn locf(&self) -> impl Fn(ValueId) -> Result<Loc, String> + '_ {
        move |v| self.loc(v)
    }

    /// `words` of scratch memory in the arena, live only during this
    /// kernel.
    pub fn scratch(&mut self, words: usize) -> Loc {
        let offset = self.scratch_base + self.scratch_used;
        self.scratch_used += words.div_ceil(4) * 4;
        Loc {
            buf: Buf::Arena,
            offset,
            dtype: DType::F32,
        }
    }

    /// A WGSL statement raising a run-time error with `message` (prefixed
    /// with the anchor node): the run then fails with that message
    /// instead of returning outputs. Invocations that raise it must still
    /// stay in bounds.
    pub fn raise(&mut self, message: &str) -> String {
        let n = self.anchor();
        self.errors.push(format!(
            "{} `%{}`: {message}",
            self.g.node(n).op.name(),
            node_label(self.g, n)
        ));
        format!("act[{}u] = {}u;", self.error_word, self.errors.len())
    }

    /// Appends compile-time data to the weight buffer; where it lives.
    pub fn add_weights(&mut self, words: &[u32]) -> Loc {
        let offset = self.weights.len();
        self.weights.extend_from_slice(words);
        self.weights.resize(self.weights.len().div_ceil(4) * 4, 0);
        Loc {
            buf: Buf::Weights,
            offset,
            dtype: DType::F32,
        }
    }

    /// The data of `v` when it is a weight known at compile time (a
    /// parameter or constant), for lowerings that transform it.
    pub fn weight_data(&self, v: ValueId) -> Option<Tensor> {
        let p = self.g.value(v).producer;
        match self.g.node(p).op {
            Op::Param(_) | Op::Constant => self.g.weight(v).ok().map(|t| t.into_owned()),
            _ => None,
        }
    }

    /// The anchor node.
    pub fn anchor(&self) -> NodeId {
        self.k.anchor.unwrap_or(self.k.nodes[0])
    }

    /// The fused nodes after the anchor (the epilogue).
    pub fn epilogue(&self) -> &[NodeId] {
        &self.k.nodes[1..]
    }

    /// The limits shaders are sized by.
    pub fn limits(&self) -> &GpuLimits {
        &self.opts.limits
    }

    /// A label for stage `what` of this kernel.
    pub fn label(&self, what: &str) -> String {
        if what.is_empty() {
            self.k.name.clone()
        } else {
            format!("{}.{what}", self.k.name)
        }
    }
}

fn unsupported(g: &Graph, n: NodeId, reason: impl Into<String>) -> CodegenError {
    CodegenError::GpuUnsupported {
        node: node_label(g, n),
        op: g.node(n).op.name().to_string(),
        reason: reason.into(),
    }
}

/// Whether the GPU backend has a lowering for `op` in a kernel of `kind`.
fn supported(g: &Graph, k: &Kernel, n: NodeId) -> bool {
    let op = &g.node(n).op;
    let first = n == k.nodes[0];
    match k.kind {
        KernelKind::View => true,
        KernelKind::Elementwise => group::per_point(op),
        KernelKind::Contraction => {
            (first && (contraction::supports(op) || extended::supports(op))) || group::per_point(op)
        }
        KernelKind::Reduction => (first && reduce::supports(op)) || group::per_point(op),
        KernelKind::DataMovement => movement::supports(op) || extended::supports(op),
    }
}

fn lower(cx: &mut GCtx<'_>) -> Result<Vec<GpuStage>, String> {
    let op = &cx.g.node(cx.anchor()).op;
    match cx.k.kind {
        KernelKind::View => Ok(Vec::new()),
        KernelKind::Elementwise => elementwise::lower(cx),
        KernelKind::Contraction if contraction::supports(op) => contraction::lower(cx),
        KernelKind::Reduction => reduce::lower(cx),
        KernelKind::DataMovement if movement::supports(op) => movement::lower(cx),
        _ => extended::lower(cx),
    }
}

/// Validates `src` with naga (parse + full validation).
pub fn validate_wgsl(src: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::default(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(src))?;
    Ok(())
}

/// Compiles `g` to WGSL compute shaders for a device with `opts.limits`.
///
/// Every op must have a lowering (the error names the node otherwise) and
/// every shader must pass naga's validation (an internal compiler error
/// with the node and the shader source otherwise).
pub fn compile_gpu(g: &Graph, opts: &GpuOptions) -> Result<GpuProgram, CodegenError> {
    let kernels = group::kernels(g);
    for k in &kernels {
        for &n in &k.nodes {
            if !supported(g, k, n) {
                return Err(unsupported(g, n, "no lowering for this op yet"));
            }
        }
    }
    let nk = kernels.len();
    let mut kernel_of: HashMap<NodeId, usize> = HashMap::new();
    for (i, k) in kernels.iter().enumerate() {
        for &n in &k.nodes {
            kernel_of.insert(n, i);
        }
    }

    // Weights and compile-time constants: binding 0.
    let mut weights: Vec<u32> = Vec::new();
    let mut locs: HashMap<ValueId, Loc> = HashMap::new();
    let mut inputs = Vec::new();
    for n in g.topo_order() {
        let node = g.node(n);
        let Some(&v) = node.outputs.first() else {
            continue;
        };
        let val = g.value(v);
        let data = match node.op {
            Op::Param(_) | Op::Constant => weight(g, v)?.into_owned(),
            Op::Shape { start, end } => {
                shape_constant(g, n, start, end).map_err(|m| unsupported(g, n, m))?
            }
            Op::Input => {
                inputs.push(v);
                continue;
            }
            _ => continue,
        };
        let w = tensor_words(&data, &format!("weight `%{}`", val.name)).map_err(|e| {
            CodegenError::Weight {
                name: val.name.clone(),
                message: e.to_string(),
            }
        })?;
        locs.insert(
            v,
            Loc {
                buf: Buf::Weights,
                offset: weights.len(),
                dtype: val.ty.dtype,
            },
        );
        weights.extend_from_slice(&w);
        weights.resize(weights.len().div_ceil(4) * 4, 0);
    }

    // Activation values: producer kernel, views resolved to their root.
    let mut alias_of: HashMap<ValueId, ValueId> = HashMap::new();
    for k in &kernels {
        if k.kind == KernelKind::View {
            let node = g.node(k.nodes[0]);
            if let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) {
                let root = alias_of.get(&x).copied().unwrap_or(x);
                alias_of.insert(y, root);
            }
        }
    }
    let mut temps: Vec<ValueId> = inputs.clone();
    let mut first: HashMap<ValueId, usize> = inputs.iter().map(|&v| (v, 0)).collect();
    for (i, k) in kernels.iter().enumerate() {
        if k.kind == KernelKind::View || matches!(g.node(k.nodes[0]).op, Op::Shape { .. }) {
            continue;
        }
        for &v in &k.outputs {
            if let std::collections::hash_map::Entry::Vacant(e) = first.entry(v) {
                e.insert(i);
                temps.push(v);
            }
        }
    }
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for n in g.topo_order() {
        let Some(&ki) = kernel_of.get(&n) else {
            continue;
        };
        for &v in &g.node(n).inputs {
            let root = alias_of.get(&v).copied().unwrap_or(v);
            let e = last.entry(root).or_insert(ki);
            *e = (*e).max(ki);
        }
    }
    for &v in g.outputs() {
        let root = alias_of.get(&v).copied().unwrap_or(v);
        last.insert(root, nk);
    }
    for &v in &inputs {
        last.insert(v, nk);
    }

    // Scratch needs: lower once against placeholder locations.
    let placeholder: HashMap<ValueId, Loc> = (0..g.value_count())
        .map(|i| {
            let v = ValueId(i as u32);
            (
                v,
                Loc {
                    buf: Buf::Arena,
                    offset: 0,
                    dtype: g.value(v).ty.dtype,
                },
            )
        })
        .collect();
    let mut scratch = vec![0usize; nk];
    for (i, k) in kernels.iter().enumerate() {
        let mut discard = Vec::new();
        let mut discard_errors = Vec::new();
        let mut cx = GCtx {
            g,
            k,
            opts,
            locs: &placeholder,
            scratch_base: 0,
            scratch_used: 0,
            weights: &mut discard,
            errors: &mut discard_errors,
            error_word: 0,
            algo: None,
        };
        lower(&mut cx).map_err(|e| unsupported(g, cx.anchor(), e))?;
        scratch[i] = cx.scratch_used;
    }

    let mut intervals = Vec::new();
    for &v in &temps {
        let f = first[&v];
        intervals.push(memplan::Interval {
            bytes: g.value(v).ty.shape.iter().product::<usize>().max(1) * 4,
            first: f,
            last: last.get(&v).copied().unwrap_or(f).max(f),
            reuse: None,
        });
    }
    for (i, &s) in scratch.iter().enumerate() {
        if s > 0 {
            intervals.push(memplan::Interval {
                bytes: s * 4,
                first: i,
                last: i,
                reuse: None,
            });
        }
    }
    let plan = memplan::plan(&intervals, 16);
    for (j, &v) in temps.iter().enumerate() {
        locs.insert(
            v,
            Loc {
                buf: Buf::Arena,
                offset: plan.offsets[j] / 4,
                dtype: g.value(v).ty.dtype,
            },
        );
    }
    let mut scratch_at = vec![0usize; nk];
    let mut j = temps.len();
    for (i, &s) in scratch.iter().enumerate() {
        if s > 0 {
            scratch_at[i] = plan.offsets[j] / 4;
            j += 1;
        }
    }
    // Views: their root's place (aliases are whole-buffer, offset 0).
    for k in &kernels {
        if k.kind == KernelKind::View {
            let node = g.node(k.nodes[0]);
            if let (Some(&x), Some(&y)) = (node.inputs.first(), node.outputs.first()) {
                let l = *locs
                    .get(&x)
                    .ok_or_else(|| unsupported(g, k.nodes[0], "operand has no buffer"))?;
                locs.insert(
                    y,
                    Loc {
                        dtype: g.value(y).ty.dtype,
                        ..l
                    },
                );
            }
        }
    }

    // The error flag: one word above everything the plan placed.
    let error_word = plan.total_bytes / 4;
    let mut errors = Vec::new();
    let mut gk = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        if matches!(g.node(k.nodes[0]).op, Op::Shape { .. }) {
            continue;
        }
        let mut cx = GCtx {
            g,
            k,
            opts,
            locs: &locs,
            scratch_base: scratch_at[i],
            scratch_used: 0,
            weights: &mut weights,
            errors: &mut errors,
            error_word,
            algo: None,
        };
        let stages = lower(&mut cx).map_err(|e| unsupported(g, cx.anchor(), e))?;
        for st in &stages {
            validate_wgsl(&st.wgsl).map_err(|message| CodegenError::Shader {
                kernel: st.label.clone(),
                message,
                shader: st.wgsl.clone(),
            })?;
        }
        if stages.is_empty() {
            continue;
        }
        let op = k
            .nodes
            .iter()
            .map(|&n| g.node(n).op.name())
            .collect::<Vec<_>>()
            .join("+");
        gk.push(GpuKernel {
            name: k.name.clone(),
            op,
            stages,
            nodes: k.nodes.iter().map(|&n| node_label(g, n)).collect(),
            algo: cx.algo.map(str::to_string),
        });
    }

    let io = |v: ValueId| -> Result<(GpuIo, bool), CodegenError> {
        let l = locs.get(&v).ok_or_else(|| CodegenError::GpuUnsupported {
            node: g.value(v).name.clone(),
            op: "output".into(),
            reason: "value has no buffer".into(),
        })?;
        Ok((
            GpuIo {
                name: g.value(v).name.clone(),
                ty: g.value(v).ty.clone(),
                offset: l.offset,
            },
            l.buf == Buf::Weights,
        ))
    };
    let mut outputs = Vec::new();
    for &v in g.outputs() {
        outputs.push(io(v)?);
    }
    let inputs = inputs
        .iter()
        .map(|&v| io(v).map(|(x, _)| x))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GpuProgram {
        graph: g.name.clone(),
        weights,
        arena_words: error_word + 4,
        inputs,
        outputs,
        kernels: gk,
        errors,
        error_word,
    })
}

/// Opens `choice`, compiles `g` for that device's limits (overriding
/// `opts.limits`) and builds the executable: the library form of
/// `dnnc run --backend gpu`.
pub fn compile_for_device(
    g: &Graph,
    opts: &GpuOptions,
    choice: &dnnc_runtime::gpu::AdapterChoice,
) -> Result<dnnc_runtime::gpu::GpuExecutable, crate::DnncError> {
    let dev = dnnc_runtime::gpu::GpuDevice::open(choice)?;
    let opts = GpuOptions {
        limits: dev.limits(),
        ..opts.clone()
    };
    let program = compile_gpu(g, &opts)?;
    Ok(dnnc_runtime::gpu::GpuExecutable::new(dev, program)?)
}

/// The shaders of `p` as `(file name, source)`: one `.wgsl` per stage,
/// numbered in dispatch order (`--emit wgsl --out DIR`).
pub fn wgsl_files(p: &GpuProgram) -> Vec<(String, String)> {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    p.stages()
        .enumerate()
        .map(|(i, st)| (format!("{i:03}_{}.wgsl", clean(&st.label)), st.wgsl.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_wgsl_is_an_internal_error_with_the_kernel_and_source() {
        let bad = format!(
            "{}\n@compute @workgroup_size(1)\nfn main() {{ let x: f32 = 1u; }}\n",
            wgsl::HEADER
        );
        let msg = validate_wgsl(&bad).unwrap_err();
        assert!(msg.contains("f32") || msg.contains("type"), "{msg}");
        let e = CodegenError::Shader {
            kernel: "conv1".into(),
            message: msg,
            shader: bad.clone(),
        };
        let text = e.to_string();
        assert!(
            text.starts_with("internal compiler error: kernel `conv1`"),
            "{text}"
        );
        assert!(
            text.contains("fn main()"),
            "the source is part of the report: {text}"
        );
        // A valid shader passes.
        let ok = format!(
            "{}\n@compute @workgroup_size(1)\nfn main() {{ act[0] = wts[0]; }}\n",
            wgsl::HEADER
        );
        validate_wgsl(&ok).unwrap();
    }

    #[test]
    fn an_op_without_a_lowering_names_the_node() {
        // Every op has a lowering once all lowerings land; the check itself
        // is what this exercises, on a kernel kind mismatch.
        let g = dnnc_ir::text::parse(
            "graph t {\n  input %x: f32[2,3]\n  %y = Relu(%x)\n  output %y\n}",
            "t.dnn",
        )
        .unwrap();
        let p = compile_gpu(&g, &GpuOptions::default()).unwrap();
        assert_eq!(p.kernels.len(), 1);
        assert_eq!(p.kernels[0].op, "Relu");
        let e = unsupported(&g, g.topo_order()[1], "because");
        assert_eq!(
            e.to_string(),
            "Relu `%y`: the GPU backend cannot compile this (because)"
        );
    }
}
