//! Contractions: Gemm, MatMul and Conv2d as calls to the native GEMMs
//! (`dnnc_sgemm_packed` when one operand is a weight, packed at compile
//! time; `dnnc_sgemm` otherwise) wrapped in generated code (batch loops,
//! tiled im2col packing, direct depthwise loops) and a generated elementwise epilogue
//! (bias, Gemm's `beta * C`, fused activations and residual adds) applied
//! to each output tile right after it is produced. A packed GEMM whose
//! epilogue is bias, then a residual add, then Relu/Clip (each optional;
//! [`FusedEp`]) instead hands it to `dnnc_sgemm_packed`, which applies it
//! in registers as it stores each tile: no second pass over the output.
//!
//! Convolution algorithms are pluggable: [`ConvAlgo`] names them and each
//! has its own lowering function; [`conv_plan`] tells which one each conv
//! gets (forced per node or globally through `CpuOptions`, else a
//! documented heuristic).

use super::conv_pool::{Band, PoolBands};
use super::elementwise::{self, bcast_strides, contiguous, Operand, SubDomain};
use super::emit::Emit;
use super::group::Kernel;
use super::{CpuOptions, KCtx};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{self, F32, I64};
use cranelift_codegen::ir::{InstBuilder, StackSlotData, StackSlotKind, Value};
use dnnc_ir::op::ConvAlgo as IrConvAlgo;
use dnnc_ir::op::{Binary, Unary, WeightLayout};
use dnnc_ir::{DType, Graph, NodeId, Op, ValueId};
pub(crate) use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::{fftconv, pgemm, AlignedBuf};

/// A convolution algorithm of the CPU backend. Each has its own lowering;
/// [`conv_plan`] tells which one every Conv2d gets and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum ConvAlgo {
    /// A generated direct loop nest (no GEMM): the baseline.
    Direct,
    /// Generated im2col packing per (image, group), then one GEMM.
    Im2col,
    /// 1x1, stride 1, no padding: the input already is the GEMM operand.
    Pointwise,
    /// One input channel per group and one output channel per group: a
    /// generated direct loop (no GEMM).
    Depthwise,
    /// Winograd F(2x2, 3x3): 4x4 input tiles, 16 batched GEMMs.
    Winograd2,
    /// Winograd F(4x4, 3x3) (points 0, ±1, ±2, ∞): 6x6 input tiles, 36
    /// batched GEMMs. `winograd` on the command line.
    #[value(alias = "winograd")]
    Winograd4,
    /// Whole-image FFT convolution (native `rustfft` helper, filter spectra
    /// precomputed at compile time).
    Fft,
}

impl ConvAlgo {
    /// The command-line spelling.
    pub fn name(self) -> &'static str {
        match self {
            ConvAlgo::Direct => "direct",
            ConvAlgo::Im2col => "im2col",
            ConvAlgo::Pointwise => "pointwise",
            ConvAlgo::Depthwise => "depthwise",
            ConvAlgo::Winograd2 => "winograd2",
            ConvAlgo::Winograd4 => "winograd4",
            ConvAlgo::Fft => "fft",
        }
    }

    /// The IR's name for this algorithm (a Conv2d's `algo` attribute).
    pub fn to_ir(self) -> IrConvAlgo {
        match self {
            ConvAlgo::Direct => IrConvAlgo::Direct,
            ConvAlgo::Im2col => IrConvAlgo::Im2col,
            ConvAlgo::Pointwise => IrConvAlgo::Pointwise,
            ConvAlgo::Depthwise => IrConvAlgo::Depthwise,
            ConvAlgo::Winograd2 => IrConvAlgo::Winograd2,
            ConvAlgo::Winograd4 => IrConvAlgo::Winograd4,
            ConvAlgo::Fft => IrConvAlgo::Fft,
        }
    }

    /// The backend algorithm a Conv2d's `algo` attribute names (`None`
    /// for `auto`).
    pub fn from_ir(a: IrConvAlgo) -> Option<ConvAlgo> {
        Some(match a {
            IrConvAlgo::Auto => return None,
            IrConvAlgo::Direct => ConvAlgo::Direct,
            IrConvAlgo::Im2col => ConvAlgo::Im2col,
            IrConvAlgo::Pointwise => ConvAlgo::Pointwise,
            IrConvAlgo::Depthwise => ConvAlgo::Depthwise,
            IrConvAlgo::Winograd2 => ConvAlgo::Winograd2,
            IrConvAlgo::Winograd4 => ConvAlgo::Winograd4,
            IrConvAlgo::Fft => ConvAlgo::Fft,
        })
    }

    /// Winograd's output tile size `m`, for the Winograd variants.
    fn wino_m(self) -> Option<usize> {
        match self {
            ConvAlgo::Winograd2 => Some(2),
            ConvAlgo::Winograd4 => Some(4),
            _ => None,
        }
    }
}

/// The algorithm one Conv2d node gets: what was asked for, what it runs,
/// and why a request could not be honoured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvChoice {
    /// Node name (its result's name), the key of
    /// [`CpuOptions::conv_algo_for`](super::CpuOptions::conv_algo_for).
    pub node: String,
    /// The algorithm asked for: by `--conv-algo-for`, else `--conv-algo`,
    /// else the node's `algo` attribute (`None`: the heuristic decides).
    pub requested: Option<ConvAlgo>,
    /// The algorithm it runs.
    pub algo: ConvAlgo,
    /// Why `requested` does not apply (the node then gets the default).
    pub fallback: Option<String>,
}

/// The algorithm for one conv. Precedence: the CLI's per-node
/// `--conv-algo-for`, then the CLI's global `--conv-algo`, then the node's
/// `algo` attribute, then the heuristic ([`ConvGeom::default_algo`]). A
/// request that does not apply is reported in `fallback`; the node then
/// gets its attribute's algorithm when that applies, else the heuristic's.
fn choose(geom: &ConvGeom, node: &str, opts: &CpuOptions) -> ConvChoice {
    // A channel-blocked conv has one lowering of each kind.
    if super::blocked::is_blocked(geom) {
        return ConvChoice {
            node: node.to_string(),
            requested: None,
            algo: if let Some(m) = super::fastconv::blocked_m(geom) {
                if m == 2 {
                    ConvAlgo::Winograd2
                } else {
                    ConvAlgo::Winograd4
                }
            } else {
                use dnnc_passes::block_channels::{blocked_kernel, BlockedKernel};
                match blocked_kernel(geom) {
                    Some(BlockedKernel::Pointwise) => ConvAlgo::Pointwise,
                    Some(BlockedKernel::Depthwise) => ConvAlgo::Depthwise,
                    // The window kernel: an implicit GEMM.
                    _ => ConvAlgo::Im2col,
                }
            },
            fallback: None,
        };
    }
    let attr = ConvAlgo::from_ir(geom.p.algo);
    let requested = opts
        .conv_algo_for
        .get(node)
        .copied()
        .or(opts.conv_algo)
        .or(attr);
    let fits = |a: ConvAlgo| geom.unfit(a.to_ir()).is_none();
    let fallback = requested.and_then(|a| geom.unfit(a.to_ir()));
    let algo = match requested {
        Some(a) if fallback.is_none() => a,
        _ => match attr {
            Some(a) if fits(a) => a,
            _ => ConvAlgo::from_ir(geom.default_algo()).unwrap_or(ConvAlgo::Im2col),
        },
    };
    ConvChoice {
        node: node.to_string(),
        requested,
        algo,
        fallback,
    }
}

fn choose_algo(geom: &ConvGeom, g: &Graph, k: &Kernel, opts: &CpuOptions) -> ConvAlgo {
    let node = g.node(k.nodes[0]);
    let name = node
        .outputs
        .first()
        .map(|&v| g.value(v).name.as_str())
        .unwrap_or("");
    choose(geom, name, opts).algo
}

/// The algorithm every Conv2d of `g` gets under `opts`, in topological
/// order: what [`compile_cpu`](super::compile_cpu) will generate, and the
/// reason wherever a forced algorithm does not apply (the command line
/// prints those as notes).
pub fn conv_plan(g: &Graph, opts: &CpuOptions) -> Vec<ConvChoice> {
    g.topo_order()
        .into_iter()
        .filter(|&n| matches!(g.node(n).op, Op::Conv2d(_)))
        .filter_map(|n| {
            let geom = ConvGeom::of_node(g, n).ok()?;
            let name = g
                .node(n)
                .outputs
                .first()
                .map(|&v| g.value(v).name.clone())?;
            Some(choose(&geom, &name, opts))
        })
        .collect()
}

/// Whether `op` can anchor a contraction kernel.
pub(crate) fn supports(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::Gemm(_) | Op::MatMul)
}

/// Whether the anchor's raw result needs its own scratch buffer: it is not
/// itself a kernel output and no output has its shape to be reused.
pub(crate) fn needs_acc_ws(g: &Graph, k: &Kernel) -> bool {
    if !k.projection.is_empty() || !k.pool.is_empty() {
        // The projection (or pool) writes the outputs; the anchor's rows
        // go to a scratch.
        return false;
    }
    let a = g.node(k.nodes[0]).outputs[0];
    let ty = &g.value(a).ty;
    !k.outputs.contains(&a) && !k.outputs.iter().any(|&v| g.value(v).ty == *ty)
}

/// Workspace sizes (bytes) a kernel needs: im2col columns, then the
/// accumulator when [`needs_acc_ws`].
pub(crate) fn workspaces(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Result<Vec<usize>, String> {
    let anchor = g.node(k.nodes[0]);
    let anchored = matches!(
        k.kind,
        super::group::KernelKind::Contraction | super::group::KernelKind::Reduction
    );
    if !anchored || anchor.outputs.len() != 1 {
        return Ok(Vec::new());
    }
    let mut ws = Vec::new();
    if matches!(anchor.op, Op::Conv2d(_)) {
        let geom = ConvGeom::of_node(g, k.nodes[0])?;
        let algo = choose_algo(&geom, g, k, opts);
        if let Some(m) = super::fastconv::blocked_m(&geom) {
            ws.extend(super::fastconv::workspaces(&geom, m));
            if needs_acc_ws(g, k) {
                ws.push(g.value(anchor.outputs[0]).ty.size_bytes());
            }
            return Ok(ws);
        }
        if super::blocked::is_blocked(&geom) {
            if !k.expansion.is_empty() {
                ws.push(super::blocked::ring_bytes(&geom));
            }
            if !k.projection.is_empty() {
                ws.push(super::blocked::row_bytes(&geom));
            }
            if needs_acc_ws(g, k) {
                ws.push(g.value(anchor.outputs[0]).ty.size_bytes());
            }
            return Ok(ws);
        }
        if let Some(pb) = pool_bands(g, k, &geom) {
            ws.push(im2col_ws_bytes(&geom, gathered(&geom, g, k, algo)));
            ws.push(pb.scratch_bytes(&geom));
            return Ok(ws);
        }
        match algo {
            ConvAlgo::Im2col => ws.push(im2col_ws_bytes(&geom, gathered(&geom, g, k, algo))),
            ConvAlgo::Fft => {
                let (hf, wf) = geom.fft_grid();
                ws.push(fftconv::workspace_bytes(geom.per_group().0, hf, wf));
            }
            _ => {}
        }
        if let Some(m) = algo.wino_m() {
            // The output transform feeds the epilogue: no accumulator.
            ws.extend(super::fastconv::workspaces(&geom, m));
            return Ok(ws);
        }
    }
    if needs_acc_ws(g, k) {
        ws.push(g.value(anchor.outputs[0]).ty.size_bytes());
    }
    Ok(ws)
}

/// Weight buffers a kernel needs prepared at compile time: Winograd's
/// transformed filters, the FFT descriptor and filter
/// spectra. Passed after the workspaces, in this order.
pub(crate) fn prepared(
    g: &Graph,
    k: &Kernel,
    opts: &CpuOptions,
) -> Result<Vec<AlignedBuf>, String> {
    let anchor = g.node(k.nodes[0]);
    if k.kind != super::group::KernelKind::Contraction {
        return Ok(Vec::new());
    }
    if matches!(anchor.op, Op::Gemm(_) | Op::MatMul) {
        let Some(gp) = gemm_pack(g, k) else {
            return Ok(Vec::new());
        };
        let w = f32_weight(g, gp.weight)?;
        return Ok(vec![pack_blocks_in(
            gemm_layout(g, k, &gp),
            (gp.m, gp.k),
            &w,
            &[0],
            (gp.rs, gp.cs),
            gp.alpha,
        )]);
    }
    if !matches!(anchor.op, Op::Conv2d(_)) {
        return Ok(Vec::new());
    }
    let geom = ConvGeom::of_node(g, k.nodes[0])?;
    if let Some(m) = super::fastconv::blocked_m(&geom) {
        if let Some(why) = dnnc_passes::block_channels::unfit(&geom) {
            return Err(why);
        }
        return Ok(super::fastconv::prepared(
            &geom,
            m,
            &f32_weight(g, anchor.inputs[1])?,
        ));
    }
    if super::blocked::is_blocked(&geom) {
        return super::blocked::prepared(g, k, &geom);
    }
    if super::into_blocked::runs(&geom) {
        return super::into_blocked::prepared(&geom, &f32_weight(g, anchor.inputs[1])?);
    }
    let algo = choose_algo(&geom, g, k, opts);
    if super::group8::runs(&geom, algo) {
        return super::group8::prepared(&geom, &f32_weight(g, anchor.inputs[1])?);
    }
    if super::dw8::runs(&geom, algo) {
        return super::dw8::prepared(&geom, &f32_weight(g, anchor.inputs[1])?);
    }
    if conv_packed(g, k, algo) {
        let (cg, mg) = geom.per_group();
        let kk = cg * geom.kh * geom.kw;
        let w = f32_weight(g, anchor.inputs[1])?;
        let offs: Vec<usize> = (0..geom.g).map(|gi| gi * mg * kk).collect();
        let layout = conv_layout(&geom, g, k, algo);
        let mut prep = vec![pack_blocks_in(layout, (mg, kk), &w, &offs, (kk, 1), 1.0)];
        if gathered(&geom, g, k, algo) {
            prep.push(i64_buf(&gather_rows(&geom)));
        }
        if let Some((bn, _, _)) = super::group::prologue_of(g, &k.prologue) {
            let (scale, shift) = bn_scale_shift(g, bn)?;
            prep.push(f32_buf(&scale));
            prep.push(f32_buf(&shift));
        }
        return Ok(prep);
    }
    if algo.wino_m().is_none() && algo != ConvAlgo::Fft {
        return Ok(Vec::new());
    }
    let wt = g
        .weight(anchor.inputs[1])
        .map_err(|e| format!("filter: {e}"))?;
    let dnnc_ir::Tensor::F32(wt) = wt.as_ref() else {
        return Err("filter must be f32".into());
    };
    let wv: Vec<f32> = wt.iter().copied().collect();
    if let Some(m) = algo.wino_m() {
        return Ok(super::fastconv::prepared(&geom, m, &wv));
    }
    let (cg, mg) = geom.per_group();
    let (hf, wf) = geom.fft_grid();
    let desc = [
        cg,
        mg,
        geom.h,
        geom.w,
        geom.p.pads[0],
        geom.p.pads[1],
        hf,
        wf,
        geom.oh,
        geom.ow,
    ]
    .map(|v| v as i64);
    let spec = fftconv::filter_spectrum(&wv, (geom.m, cg, geom.kh, geom.kw), hf, wf)?;
    Ok(vec![i64_buf(&desc), f32_buf(&spec)])
}

/// The weight this contraction kernel reads only in the form `prepared`
/// builds at compile time (packed panels, Winograd-transformed filters,
/// filter spectra), so the executable need not keep the original too.
pub(crate) fn superseded_weight(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Option<ValueId> {
    if k.kind != super::group::KernelKind::Contraction {
        return None;
    }
    let anchor = g.node(k.nodes[0]);
    match anchor.op {
        Op::Gemm(_) | Op::MatMul => gemm_pack(g, k).map(|gp| gp.weight),
        Op::Conv2d(_) => {
            let geom = ConvGeom::of_node(g, k.nodes[0]).ok()?;
            let algo = choose_algo(&geom, g, k, opts);
            let w = anchor.inputs[1];
            let prepared = super::blocked::is_blocked(&geom)
                || super::into_blocked::runs(&geom)
                || conv_packed(g, k, algo)
                || algo.wino_m().is_some()
                || algo == ConvAlgo::Fft
                || super::group8::runs(&geom, algo)
                || super::dw8::runs(&geom, algo);
            (prepared && is_weight(g, w)).then_some(w)
        }
        _ => None,
    }
}

/// Whether `v` is an f32 weight (initializer or parameter) known at
/// compile time, so a GEMM can take it packed.
/// The algorithm an ungrouped NCHW conv kernel `k` (plain layout, not
/// channel-blocked) runs, for [`super::planes`]; `None` for any other.
pub(crate) fn strided_algo(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Option<ConvAlgo> {
    let geom = ConvGeom::of_node(g, *k.nodes.first()?).ok()?;
    let plain = !super::blocked::is_blocked(&geom) && !super::into_blocked::runs(&geom);
    (plain && geom.g == 1).then(|| choose_algo(&geom, g, k, opts))
}

/// Whether pointwise conv kernel `k` (a conv plus at most one Relu or
/// Clip) runs its filter packed with bias and clamp in the GEMM's
/// epilogue, as [`match_fused`] takes them: a constant filter, a bias of
/// one f32 per output channel.
pub(crate) fn packs_fused(g: &Graph, k: &Kernel) -> bool {
    let node = g.node(k.nodes[0]);
    let m = g.value(node.inputs[1]).ty.shape.first().copied();
    let bias_fits = node.inputs.get(2).is_none_or(|&b| {
        let t = &g.value(b).ty;
        t.dtype == DType::F32 && Some(t.shape.as_slice()) == m.as_ref().map(std::slice::from_ref)
    });
    let clamp_fits = k.nodes[1..].iter().all(|&n| match g.node(n).op {
        Op::Unary(Unary::Clip { min, max }) => min <= max,
        _ => true,
    });
    conv_packed(g, k, ConvAlgo::Pointwise) && bias_fits && clamp_fits
}

fn is_weight(g: &Graph, v: ValueId) -> bool {
    g.value(v).ty.dtype == DType::F32 && g.weight(v).is_ok()
}

/// The f32 elements of weight `v`, row-major.
fn f32_weight(g: &Graph, v: ValueId) -> Result<Vec<f32>, String> {
    let t = g.weight(v).map_err(|e| format!("weight: {e}"))?;
    match t.as_ref() {
        dnnc_ir::Tensor::F32(a) => Ok(a.iter().copied().collect()),
        _ => Err("weight must be f32".into()),
    }
}

/// Whether a conv with algorithm `algo` runs its GEMMs on the filter
/// packed at compile time (im2col and pointwise with a constant filter).
fn conv_packed(g: &Graph, k: &Kernel, algo: ConvAlgo) -> bool {
    matches!(algo, ConvAlgo::Im2col | ConvAlgo::Pointwise)
        && is_weight(g, g.node(k.nodes[0]).inputs[1])
}

/// How a packed filter is laid out: the conv's `layout=` when set
/// (`lanes` only where the AVX-512 kernel runs, else panels), otherwise
/// [`pgemm::Layout::choose`] for the conv's per-group GEMM: `m = M/G`, `k = C/G·KH·KW`, `n` the columns of
/// one image (pointwise) or of one full im2col chunk; a gathered B's
/// segments are output rows). The lanes layout pays off on small
/// maps: MobileNet-V2's 7x7 pointwise convs (e.g. 320 x 49 x 960, hot:
/// 137 → 182 GFLOP/s).
fn conv_layout(geo: &ConvGeom, g: &Graph, k: &Kernel, algo: ConvAlgo) -> pgemm::Layout {
    // A prologue is applied as B is packed, which only the panels
    // layout does for every element.
    if !conv_packed(g, k, algo) || !k.prologue.is_empty() || k.concat.is_some() {
        return pgemm::Layout::Panels;
    }
    // A layout recorded in the IR (the egraph pass's choice, or the
    // user's) wins; lanes needs the AVX-512 micro-kernel.
    if let Op::Conv2d(p) = &g.node(k.nodes[0]).op {
        match p.layout {
            WeightLayout::Panels => return pgemm::Layout::Panels,
            WeightLayout::Lanes if pgemm::Kernel::best() == pgemm::Kernel::Avx512 => {
                return pgemm::Layout::Lanes
            }
            WeightLayout::Lanes => return pgemm::Layout::Panels,
            WeightLayout::Auto => {}
        }
    }
    let (cg, mg) = geo.per_group();
    let kk = cg * geo.kh * geo.kw;
    let n = match algo {
        ConvAlgo::Pointwise => geo.oh * geo.ow,
        _ => chunk_rows(geo) * geo.ow,
    };
    if gathered(geo, g, k, algo) {
        // The gathered B's segments are output rows.
        return pgemm::Layout::choose_segments(mg, n, kk, geo.ow);
    }
    // A pointwise conv reads its input in place; past L2 (batch 8 on
    // 17x17 and larger maps) each image's B streams from L3.
    let input_bytes = geo.n * geo.c * geo.h * geo.w * 4;
    if algo == ConvAlgo::Pointwise && input_bytes > COLD_INPUT_BYTES {
        return pgemm::Layout::choose_cold(mg, n, kk);
    }
    pgemm::Layout::choose(mg, n, kk)
}

/// Input bytes past which a pointwise conv's B is taken to stream from
/// beyond L2 (2 MiB per core here) when choosing its layout
/// ([`pgemm::Layout::choose_cold`]); every zoo model's batch-1 inputs
/// stay under it.
const COLD_INPUT_BYTES: usize = 2 << 20;

/// The layout of a Gemm/MatMul's packed weight: a weight B (a
/// fully-connected layer: the kernel computes `Cᵀ = Wᵀ·Xᵀ`, the batch rows
/// its columns) as [`pgemm::Layout::choose`] says for the rows it is
/// multiplied by; a weight A in panels. At batch 1 that is a
/// matrix-vector product; at batch 8 the panels kernel masks half of each
/// 16-lane FMA (8 columns), the lanes kernel fills every lane with 32
/// output features and reads the batch rows by their column stride
/// (ResNet-50's 1000 x 2048 classifier at batch 8: ~37% of the core's
/// peak in panels).
fn gemm_layout(g: &Graph, k: &Kernel, gp: &GemmPack) -> pgemm::Layout {
    let node = g.node(k.nodes[0]);
    let sa = &g.value(node.inputs[0]).ty.shape;
    let rows = match &node.op {
        Op::Gemm(p) if p.trans_a => sa[1],
        Op::Gemm(_) => sa[0],
        _ => sa.iter().rev().skip(1).product(),
    };
    if gp.b_side {
        pgemm::Layout::choose(gp.m, rows, gp.k)
    } else {
        pgemm::Layout::Panels
    }
}

/// A Gemm/MatMul operand that is a weight, as the packed A of
/// `dnnc_sgemm_packed`: `m x k`, element `(i, p)` at `i*rs + p*cs` of the
/// weight, times `alpha`. `b_side`: the weight is the B operand, so the
/// kernel computes `Cᵀ = op(B)ᵀ · op(A)ᵀ` (the batch becomes its `n`).
struct GemmPack {
    weight: ValueId,
    b_side: bool,
    m: usize,
    k: usize,
    rs: usize,
    cs: usize,
    alpha: f32,
}

/// How a Gemm/MatMul kernel uses a packed weight, if it has one: a weight
/// B is preferred (a fully-connected layer), else a weight A; MatMul only
/// with a 2-D weight (its batch then folds into the other operand).
fn gemm_pack(g: &Graph, k: &Kernel) -> Option<GemmPack> {
    let node = g.node(k.nodes[0]);
    let sa = &g.value(node.inputs[0]).ty.shape;
    let sb = &g.value(node.inputs[1]).ty.shape;
    match &node.op {
        Op::Gemm(p) => {
            let (m, kd) = if p.trans_a {
                (sa[1], sa[0])
            } else {
                (sa[0], sa[1])
            };
            let n = if p.trans_b { sb[0] } else { sb[1] };
            if is_weight(g, node.inputs[1]) {
                let (rs, cs) = if p.trans_b { (kd, 1) } else { (1, n) };
                Some(GemmPack {
                    weight: node.inputs[1],
                    b_side: true,
                    m: n,
                    k: kd,
                    rs,
                    cs,
                    alpha: p.alpha,
                })
            } else if is_weight(g, node.inputs[0]) {
                let (rs, cs) = if p.trans_a { (1, m) } else { (kd, 1) };
                Some(GemmPack {
                    weight: node.inputs[0],
                    b_side: false,
                    m,
                    k: kd,
                    rs,
                    cs,
                    alpha: p.alpha,
                })
            } else {
                None
            }
        }
        Op::MatMul => {
            if sb.len() == 2 && is_weight(g, node.inputs[1]) {
                let (kd, n) = (sb[0], sb[1]);
                Some(GemmPack {
                    weight: node.inputs[1],
                    b_side: true,
                    m: n,
                    k: kd,
                    rs: 1,
                    cs: n,
                    alpha: 1.0,
                })
            } else if sa.len() == 2 && sb.len() >= 2 && is_weight(g, node.inputs[0]) {
                let (m, kd) = (sa[0], sa[1]);
                Some(GemmPack {
                    weight: node.inputs[0],
                    b_side: false,
                    m,
                    k: kd,
                    rs: kd,
                    cs: 1,
                    alpha: 1.0,
                })
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Floats from one packed block to the next in a buffer of several
/// (whole cache lines, so every block starts 64-byte aligned).
pub(crate) fn packed_stride_in(layout: pgemm::Layout, m: usize, k: usize) -> usize {
    pgemm::packed_bytes_for(layout, m, k).div_ceil(64) * 16
}

/// One weight buffer holding `offs.len()` `m x k` matrices packed in
/// `layout` for `dnnc_sgemm_packed`, [`packed_stride_in`] floats apart:
/// block `b` has element `(i, p)` at `src[offs[b] + i*rs + p*cs]`, times
/// `alpha`.
pub(crate) fn pack_blocks_in(
    layout: pgemm::Layout,
    (m, k): (usize, usize),
    src: &[f32],
    offs: &[usize],
    (rs, cs): (usize, usize),
    alpha: f32,
) -> AlignedBuf {
    let stride = packed_stride_in(layout, m, k) * 4;
    let mut out = AlignedBuf::zeroed(stride * offs.len());
    for (i, &o) in offs.iter().enumerate() {
        let pb = pgemm::pack_a_for(layout, m, k, &src[o..], rs, cs, alpha);
        out.as_bytes_mut()[i * stride..i * stride + pb.len()].copy_from_slice(pb.as_bytes());
    }
    out
}

/// Error message of a packed-weight GEMM whose buffer does not match it
/// (error code 1 of every kernel that calls `dnnc_sgemm_packed`).
pub(crate) const PACKED_MISMATCH: &str =
    "packed weight does not match its GEMM (packed for another kernel or shape)";

/// Emits `dnnc_sgemm_packed(ap, m, n, k, b, .., c, .., accumulate)`:
/// `C (+)= A_packed · B`, failing with error code 1 ([`PACKED_MISMATCH`])
/// when the packed buffer does not describe an `m x k` A.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_packed(
    e: &mut Emit<'_>,
    dims: (usize, usize, usize),
    ap: Value,
    b: Value,
    b_str: (i64, i64),
    cp: Value,
    c_str: (i64, i64),
    accumulate: bool,
) {
    let mode = e.ci(accumulate as i64);
    sgemm_packed_ep(e, dims, ap, b, b_str, cp, c_str, mode);
}

/// A conv's or Gemm's fused nodes in the form the packed GEMM applies as
/// it stores (`C = act(clamp(A·B + bias + R, lo, hi))`, see
/// [`pgemm::Epilogue`]): a per-row bias, a residual operand of the
/// result's shape, a Relu/Clip clamp, a Sigmoid or SiLU (`x *
/// sigmoid(x)`) activation.
pub(crate) struct FusedEp {
    /// The bias value (`m` floats per GEMM), if any.
    pub bias: Option<ValueId>,
    /// The residual operand, if any.
    pub res: Option<ValueId>,
    /// Clamp bounds (infinite when there is no Relu/Clip).
    pub lo: f32,
    /// Upper clamp bound.
    pub hi: f32,
    /// Activation after the clamp ([`pgemm::Epilogue::act`]).
    pub act: u32,
}

/// Whether a conv kernel's lowering applies a prologue
/// ([`super::group::absorb_prologues`]): a packed pointwise conv of one
/// group over more than one output column (`n = 1` GEMMs read B in
/// place).
pub(crate) fn takes_prologue(g: &Graph, k: &Kernel, opts: &CpuOptions) -> bool {
    let Ok(geom) = ConvGeom::of_node(g, k.nodes[0]) else {
        return false;
    };
    let algo = choose_algo(&geom, g, k, opts);
    !super::blocked::is_blocked(&geom)
        && algo == ConvAlgo::Pointwise
        && geom.g == 1
        && geom.oh * geom.ow > 1
        && conv_packed(g, k, algo)
        && g.value(g.node(k.nodes[0]).inputs[0]).ty.dtype == DType::F32
}

/// Whether a conv kernel's lowering reads a channel Concat's operands in
/// place of its result ([`super::group::absorb_concats`]): a kernel with
/// a prologue, whose B the packed GEMM packs anyway (through a row table
/// then, [`concat_rows`]). Without one, B's rows would be read through
/// the table where the plain path reads them in place and streams the
/// next block in: Inception-v3's 1x1 convs at batch 8 reading its
/// Concats' operands ran 4.7% slower, more than the copies they saved.
pub(crate) fn takes_concat(g: &Graph, k: &Kernel, opts: &CpuOptions) -> bool {
    !k.prologue.is_empty() && takes_prologue(g, k, opts)
}

/// Whether conv kernel `k` takes max pool node `pool` into itself
/// ([`super::group::absorb_pools`], lowered by [`conv_gemm`] in bands,
/// see [`super::conv_pool`]): an NCHW im2col conv of one group with its
/// filter packed at compile time, a bias and/or a Relu or Clip fused
/// into its GEMM and nothing else, a result of at least
/// [`super::conv_pool::MIN_CONV_BYTES`] per image, and bands that
/// [`super::conv_pool::PoolBands::plan`] can make.
pub(crate) fn takes_pool(g: &Graph, k: &Kernel, pool: NodeId, opts: &CpuOptions) -> bool {
    let Ok(geom) = ConvGeom::of_node(g, k.nodes[0]) else {
        return false;
    };
    let conv = g.node(k.nodes[0]);
    let algo = choose_algo(&geom, g, k, opts);
    let plain = !super::blocked::is_blocked(&geom)
        && !super::into_blocked::runs(&geom)
        && !super::group8::runs(&geom, algo)
        && !super::dw8::runs(&geom, algo);
    let bias = conv.inputs.get(2).map(|&b| &g.value(b).ty);
    let bias_fits = bias.is_none_or(|t| t.dtype == DType::F32 && t.shape == [geom.m]);
    let clamp = match &k.nodes[1..] {
        [] => false,
        rest => super::group::clamp_after(g, k.nodes[0], rest).is_some(),
    };
    let out = *g.node(pool).inputs.first().unwrap_or(&conv.outputs[0]);
    let last = g
        .node(*k.nodes.last().unwrap_or(&k.nodes[0]))
        .outputs
        .first();
    let conv_bytes = geom.m * geom.oh * geom.ow * 4;
    plain
        && algo == ConvAlgo::Im2col
        && conv_packed(g, k, algo)
        && bias_fits
        && (bias.is_some() || clamp)
        && (k.nodes.len() == 1 || clamp)
        && last == Some(&out)
        && k.outputs == [out]
        && g.value(out).ty.dtype == DType::F32
        && conv_bytes >= super::conv_pool::MIN_CONV_BYTES
        && plan_of(g, &geom, pool).is_some()
}

/// The bands of max pool node `pool` on conv `geom`'s result.
fn plan_of(g: &Graph, geom: &ConvGeom, pool: NodeId) -> Option<super::conv_pool::PoolBands> {
    let node = g.node(pool);
    let Op::MaxPool(p) = &node.op else {
        return None;
    };
    let ys = &g.value(*node.outputs.first()?).ty.shape;
    let (&[n, m, ohp, owp], &[xn, xm, xh, xw]) = (
        ys.as_slice(),
        g.value(*node.inputs.first()?).ty.shape.as_slice(),
    ) else {
        return None;
    };
    if (n, m, xn, xm, xh, xw) != (geom.n, geom.m, geom.n, geom.m, geom.oh, geom.ow) {
        return None;
    }
    super::conv_pool::PoolBands::plan(geom, p, ohp, owp)
}

/// The bands of kernel `k`'s absorbed max pool, if it has one.
fn pool_bands(g: &Graph, k: &Kernel, geom: &ConvGeom) -> Option<super::conv_pool::PoolBands> {
    plan_of(g, geom, *k.pool.first()?)
}

/// Matches the kernel's fused nodes against [`FusedEp`]: after the anchor
/// (whose own bias is `bias`), at most one Add of a same-shape value read
/// from outside the kernel, then at most one Relu or Clip (constant bounds,
/// `min <= max`), then at most a Sigmoid, or a Sigmoid and the Mul of its
/// operand by its result (SiLU), in that order, each consuming the
/// previous result, which nothing else uses (SiLU's operand: only its
/// Sigmoid and Mul); the last result must be the kernel's only output.
/// `None`: the generated elementwise epilogue handles the kernel.
pub(crate) fn match_fused(c: &KCtx<'_>, bias: Option<ValueId>) -> Option<FusedEp> {
    match_fused_in(c.g, c.k, bias)
}

/// [`match_fused`] on the graph and kernel alone (the memory planner asks
/// it before any code is emitted).
pub(crate) fn match_fused_in(g: &Graph, k: &Kernel, bias: Option<ValueId>) -> Option<FusedEp> {
    let a = *g.node(k.nodes[0]).outputs.first()?;
    let ty = &g.value(a).ty;
    if ty.dtype != DType::F32 {
        return None;
    }
    let (mut cur, mut res, mut clamp, mut act) = (a, None, None, pgemm::ACT_NONE);
    // The value a Sigmoid read: a Mul of it by the Sigmoid's result is SiLU.
    let mut gated: Option<ValueId> = None;
    for &n in &k.nodes[1..] {
        let node = g.node(n);
        if k.outputs.contains(&cur) || node.outputs.len() != 1 || act == pgemm::ACT_SILU {
            return None;
        }
        match (&node.op, node.inputs.as_slice()) {
            (Op::Unary(Unary::Sigmoid), &[x]) if x == cur && act == pgemm::ACT_NONE => {
                act = pgemm::ACT_SIGMOID;
                gated = Some(cur);
            }
            (Op::Binary(Binary::Mul), &[x, y])
                if act == pgemm::ACT_SIGMOID
                    && gated.is_some_and(|v| (x, y) == (v, cur) || (x, y) == (cur, v)) =>
            {
                act = pgemm::ACT_SILU;
            }
            (Op::Binary(Binary::Add), &[x, y])
                if res.is_none() && clamp.is_none() && act == pgemm::ACT_NONE =>
            {
                let r = match (x == cur, y == cur) {
                    (true, false) => y,
                    (false, true) => x,
                    _ => return None,
                };
                if g.value(r).ty != *ty || !k.inputs.contains(&r) {
                    return None;
                }
                res = Some(r);
            }
            (Op::Unary(Unary::Relu), &[x])
                if x == cur && clamp.is_none() && act == pgemm::ACT_NONE =>
            {
                clamp = Some((0.0, f32::INFINITY));
            }
            (Op::Unary(Unary::Clip { min, max }), &[x])
                if x == cur && clamp.is_none() && act == pgemm::ACT_NONE && min <= max =>
            {
                clamp = Some((*min, *max));
            }
            _ => return None,
        }
        cur = node.outputs[0];
        if g.value(cur).ty != *ty {
            return None;
        }
    }
    let nothing = bias.is_none() && res.is_none() && clamp.is_none() && act == pgemm::ACT_NONE;
    // With an absorbed pool the chain ends at the pool's input.
    let end = match k.pool.first() {
        Some(&p) => g.node(p).inputs.first().copied() == Some(cur),
        None => k.outputs == [cur],
    };
    if !end || nothing {
        return None;
    }
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    Some(FusedEp {
        bias,
        res,
        lo,
        hi,
        act,
    })
}

/// Builds a [`pgemm::Epilogue`] on the stack and returns its address, the
/// last argument of [`sgemm_packed_ep`]: `bias` and `res` are element
/// pointers already offset to the GEMM's first row and column.
pub(crate) fn ep_desc(
    e: &mut Emit<'_>,
    bias: Option<Value>,
    res: Option<(Value, (i64, i64))>,
    lh: (f32, f32, u32),
) -> Value {
    ep_desc_pro(e, bias, res, lh, None)
}

/// A [`pgemm::Prologue`] in generated code: the per-row scale and shift
/// buffers (already at the GEMM's first row) and the clamp bounds.
#[derive(Clone, Copy)]
pub(crate) struct ProDesc {
    scale: Value,
    shift: Value,
    lo: f32,
    hi: f32,
}

/// [`ep_desc`] with a prologue on B's rows.
pub(crate) fn ep_desc_pro(
    e: &mut Emit<'_>,
    bias: Option<Value>,
    res: Option<(Value, (i64, i64))>,
    (lo, hi, act): (f32, f32, u32),
    pro: Option<ProDesc>,
) -> Value {
    let size = std::mem::size_of::<pgemm::Epilogue>() as u32;
    let ss =
        e.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 3));
    let p = e.b.ins().stack_addr(I64, ss, 0);
    let null = e.ci(0);
    let (rp, (rrs, rcs)) = res.unwrap_or((null, (0, 0)));
    let fields = [
        (
            bias.unwrap_or(null),
            std::mem::offset_of!(pgemm::Epilogue, bias),
        ),
        (rp, std::mem::offset_of!(pgemm::Epilogue, res)),
        (e.ci(rrs), std::mem::offset_of!(pgemm::Epilogue, res_rs)),
        (e.ci(rcs), std::mem::offset_of!(pgemm::Epilogue, res_cs)),
        (e.cf(lo), std::mem::offset_of!(pgemm::Epilogue, lo)),
        (e.cf(hi), std::mem::offset_of!(pgemm::Epilogue, hi)),
    ];
    for (v, off) in fields {
        e.b.ins().store(super::emit::mem(), v, p, off as i32);
    }
    let act =
        e.b.ins()
            .iconst(cranelift_codegen::ir::types::I32, act as i64);
    let off = std::mem::offset_of!(pgemm::Epilogue, act) as i32;
    e.b.ins().store(super::emit::mem(), act, p, off);
    let po = std::mem::offset_of!(pgemm::Epilogue, pro);
    let p0 = pgemm::Prologue::NONE;
    let pro = pro.unwrap_or(ProDesc {
        scale: null,
        shift: null,
        lo: p0.lo,
        hi: p0.hi,
    });
    let fields = [
        (pro.scale, std::mem::offset_of!(pgemm::Prologue, scale)),
        (pro.shift, std::mem::offset_of!(pgemm::Prologue, shift)),
        (e.cf(pro.lo), std::mem::offset_of!(pgemm::Prologue, lo)),
        (e.cf(pro.hi), std::mem::offset_of!(pgemm::Prologue, hi)),
    ];
    for (v, off) in fields {
        e.b.ins().store(super::emit::mem(), v, p, (po + off) as i32);
    }
    p
}

/// [`sgemm_packed`] with its last argument as a value: 0 (overwrite), 1
/// (accumulate) or the address of an epilogue descriptor ([`ep_desc`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_packed_ep(
    e: &mut Emit<'_>,
    (m, n, k): (usize, usize, usize),
    ap: Value,
    b: Value,
    (b_rs, b_cs): (i64, i64),
    cp: Value,
    (c_rs, c_cs): (i64, i64),
    mode: Value,
) {
    let b = [b, e.ci(b_rs), e.ci(b_cs)];
    let f = e.psgemm;
    call_packed(e, f, ap, (m, n, k), &b, (cp, (c_rs, c_cs)), mode);
}

/// A weight buffer holding `v`.
pub(crate) fn f32_buf(v: &[f32]) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(v.len() * 4);
    for (c, x) in b.as_bytes_mut().chunks_exact_mut(4).zip(v) {
        c.copy_from_slice(&x.to_ne_bytes());
    }
    b
}

/// An inference BatchNormalization's per-channel `(scale, shift)`, in
/// f32 with the operations the generated elementwise kernel performs
/// (`scale = gamma / sqrt(var + eps)`, `shift = beta - mean * scale`), so
/// a prologue transforms each element as that kernel would.
pub(crate) fn bn_scale_shift(
    g: &Graph,
    bn: dnnc_ir::NodeId,
) -> Result<(Vec<f32>, Vec<f32>), String> {
    let node = g.node(bn);
    let Op::BatchNormalization { epsilon } = node.op else {
        return Err("not a BatchNormalization".into());
    };
    let p: Vec<Vec<f32>> = node.inputs[1..5]
        .iter()
        .map(|&v| f32_weight(g, v))
        .collect::<Result<_, _>>()?;
    let (gamma, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
    let scale: Vec<f32> = gamma
        .iter()
        .zip(var)
        .map(|(&s, &v)| s / (v + epsilon).sqrt())
        .collect();
    let shift = beta
        .iter()
        .zip(mean)
        .zip(&scale)
        .map(|((&b, &m), &a)| b - m * a)
        .collect();
    Ok((scale, shift))
}

/// A weight buffer holding `v`.
pub(crate) fn i64_buf(v: &[i64]) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(v.len() * 8);
    for (c, x) in b.as_bytes_mut().chunks_exact_mut(8).zip(v) {
        c.copy_from_slice(&x.to_ne_bytes());
    }
    b
}

/// Argument index of the accumulator (anchor result before the epilogue).
pub(crate) fn acc_arg(c: &KCtx<'_>) -> Result<usize, String> {
    let a = c.g.node(c.k.nodes[0]).outputs[0];
    if needs_acc_ws(c.g, c.k) {
        return c
            .ws
            .last()
            .copied()
            .ok_or("missing accumulator workspace".into());
    }
    if c.k.outputs.contains(&a) {
        return c.arg(a);
    }
    let ty = &c.g.value(a).ty;
    let v =
        c.k.outputs
            .iter()
            .find(|&&v| c.g.value(v).ty == *ty)
            .ok_or("no buffer for the contraction result")?;
    c.arg(*v)
}

/// Lowers a contraction kernel; returns its error messages (none).
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    match &c.g.node(c.k.nodes[0]).op {
        Op::Conv2d(_) => return lower_conv(e, c),
        Op::Gemm(p) => lower_gemm(e, c, p.alpha, p.beta, p.trans_a, p.trans_b)?,
        Op::MatMul => lower_matmul(e, c)?,
        other => return Err(format!("{} is not a contraction", other.name())),
    }
    Ok(vec![PACKED_MISMATCH.to_string()])
}

/// Emits `dnnc_sgemm(m, n, k, a, .., b, .., c, .., alpha, 0)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    e: &mut Emit<'_>,
    (m, n, k): (usize, usize, usize),
    a: Value,
    (a_rs, a_cs): (i64, i64),
    b: Value,
    (b_rs, b_cs): (i64, i64),
    cp: Value,
    (c_rs, c_cs): (i64, i64),
    alpha: f32,
) {
    let mut args = vec![e.ci(m as i64), e.ci(n as i64), e.ci(k as i64), a];
    args.push(e.ci(a_rs));
    args.push(e.ci(a_cs));
    args.push(b);
    args.push(e.ci(b_rs));
    args.push(e.ci(b_cs));
    args.push(cp);
    args.push(e.ci(c_rs));
    args.push(e.ci(c_cs));
    args.push(e.cf(alpha));
    args.push(e.cf(0.0));
    let f = e.sgemm;
    e.b.ins().call(f, &args);
}

/// Pointer to element `idx` of f32 buffer `base`.
pub(crate) fn at(e: &mut Emit<'_>, base: Value, idx: Value) -> Value {
    e.addr(base, idx, 4)
}

/// A conv kernel's epilogue as a runtime conv kernel takes it (the
/// blocked and grouped-8 convs): its bias (checked to be f32[`m`]) and
/// the fused epilogue [`match_fused`] finds where `takes` accepts it, else
/// the bias alone with the generic epilogue spec over the result for the
/// rest. Returns the accumulator argument, the fused part with its bias
/// and residual buffers, and the spec.
pub(crate) fn conv_epilogue<'g>(
    e: &Emit<'_>,
    c: &KCtx<'g>,
    m: usize,
    takes: impl Fn(&FusedEp) -> bool,
) -> Result<RuntimeConvEp<'g>, String> {
    let node = c.g.node(c.k.nodes[0]);
    let acc = acc_arg(c)?;
    let bias_v = node.inputs.get(2).copied();
    if let Some(b) = bias_v {
        let t = &c.g.value(b).ty;
        if t.dtype != DType::F32 || t.shape != [m] {
            return Err(format!("bias must be f32[{m}]"));
        }
    }
    let fused = match_fused(c, bias_v).filter(|f| takes(f));
    let spec = if fused.is_some() {
        None
    } else {
        epilogue(c, acc, None)?
    };
    let ep = fused.unwrap_or(FusedEp {
        bias: bias_v,
        res: None,
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
        act: pgemm::ACT_NONE,
    });
    let buf = |v: Option<ValueId>| -> Result<Option<Value>, String> {
        v.map(|v| c.arg(v).map(|a| e.bufs[a])).transpose()
    };
    Ok(RuntimeConvEp {
        acc,
        bias: buf(ep.bias)?,
        res: buf(ep.res)?,
        ep,
        spec,
    })
}

/// [`conv_epilogue`]'s result.
pub(crate) struct RuntimeConvEp<'g> {
    /// The argument the conv's raw result goes to.
    pub acc: usize,
    /// The fused part (bias alone when the spec does the rest).
    pub ep: FusedEp,
    /// The bias buffer, if any.
    pub bias: Option<Value>,
    /// The residual buffer, if fused.
    pub res: Option<Value>,
    /// The generic epilogue over the result, when the fused one did not fit.
    pub spec: Option<elementwise::EwSpec<'g>>,
}

/// The epilogue spec over the anchor's output domain: the anchor value is
/// `acc + scale * extra` (bias or Gemm's C), then the fused nodes.
pub(crate) fn epilogue<'g>(
    c: &KCtx<'g>,
    acc: usize,
    extra: Option<(ValueId, Vec<usize>, f32)>,
) -> Result<Option<elementwise::EwSpec<'g>>, String> {
    epilogue_from(c, acc, extra, 0)
}

/// [`epilogue`] of the kernel's nodes after its first `skip` fused ones
/// (which the GEMM applied as it stored: `acc` then holds the last one's
/// value).
fn epilogue_after<'g>(
    c: &KCtx<'g>,
    acc: usize,
    skip: usize,
) -> Result<Option<elementwise::EwSpec<'g>>, String> {
    epilogue_from(c, acc, None, skip)
}

fn epilogue_from<'g>(
    c: &KCtx<'g>,
    acc: usize,
    extra: Option<(ValueId, Vec<usize>, f32)>,
    skip: usize,
) -> Result<Option<elementwise::EwSpec<'g>>, String> {
    let a = c.g.node(c.k.nodes[skip]).outputs[0];
    let domain = c.g.value(a).ty.shape.clone();
    let rest = &c.k.nodes[1 + skip..];
    let acc_is_out = c.k.outputs.contains(&a) && c.arg(a)? == acc;
    if rest.is_empty() && extra.is_none() && acc_is_out {
        return Ok(None);
    }
    let acc_op = Operand {
        arg: acc,
        dtype: DType::F32,
        strides: contiguous(&domain),
    };
    let extra = match extra {
        Some((v, eff, s)) => Some((
            Operand {
                arg: c.arg(v)?,
                dtype: DType::F32,
                strides: bcast_strides(&eff, &domain)
                    .ok_or("bias does not broadcast to the result")?,
            },
            s,
        )),
        None => None,
    };
    let spec = elementwise::spec_for(
        c.g,
        &domain,
        rest,
        &c.arg_of,
        vec![(a, acc_op, extra)],
        &c.k.outputs,
    )?;
    Ok(Some(spec))
}

/// The nodes after a MatMul by a weight B that its packed GEMM applies
/// as it stores (`Cᵀ = Bᵀ Aᵀ`, so a bias per output feature is a bias
/// per GEMM row): a bias Add of `n` floats, then optionally the GELU
/// the exporters write (`Div(sqrt 2) -> Erf -> Add(1) -> Mul(x) ->
/// Mul(0.5)`, [`pgemm::ACT_GELU`], whose native code repeats the
/// generated code's operations, so the result is the unfused build's
/// bits on every kernel and layout). Returns the bias, the activation
/// and how many nodes that is; `None` where the kernel's first node after
/// the MatMul is no such bias or an intermediate value is read outside
/// the chain.
fn matmul_epilogue(g: &Graph, k: &Kernel, gp: &GemmPack) -> Option<(ValueId, u32, usize)> {
    let scalar = |v: ValueId| -> Option<f32> {
        let t = g.weight(v).ok()?;
        match t.as_ref() {
            dnnc_ir::Tensor::F32(a) if a.len() == 1 => a.iter().next().copied(),
            _ => None,
        }
    };
    // The other operand of binary node `n` whose one operand is `cur`.
    let other = |n: dnnc_ir::NodeId, op: Binary, cur: ValueId| -> Option<ValueId> {
        let node = g.node(n);
        match (&node.op, node.inputs.as_slice()) {
            (Op::Binary(b), &[x, y]) if *b == op && x == cur && y != cur => Some(y),
            (Op::Binary(b), &[x, y]) if *b == op && y == cur && x != cur => Some(x),
            _ => None,
        }
    };
    // Whether `v` is read only by node `next` and is no kernel output.
    let private = |v: ValueId, next: dnnc_ir::NodeId| {
        !k.outputs.contains(&v) && g.users(v).iter().all(|&(u, _)| u == next)
    };
    let rest = &k.nodes[1..];
    let out = |n: dnnc_ir::NodeId| g.node(n).outputs[0];
    let a = out(k.nodes[0]);
    let (&add, after) = rest.split_first()?;
    let bias = other(add, Binary::Add, a)?;
    let bt = &g.value(bias).ty;
    let bias_ok = bt.dtype == DType::F32
        && bt.shape.last() == Some(&gp.m)
        && bt.shape.iter().product::<usize>() == gp.m
        && g.weight(bias).is_ok()
        && g.value(out(add)).ty == g.value(a).ty
        && private(a, add);
    if !bias_ok {
        return None;
    }
    let x = out(add);
    let chain = after.get(..5).and_then(|ch| {
        let (div, erf, add1, mul, half) = (ch[0], ch[1], ch[2], ch[3], ch[4]);
        let d = other(div, Binary::Div, x).filter(|_| g.node(div).inputs[0] == x)?;
        (scalar(d)? == std::f32::consts::SQRT_2).then_some(())?;
        let en = g.node(erf);
        matches!((&en.op, en.inputs.as_slice()), (Op::Unary(Unary::Erf), &[v]) if v == out(div))
            .then_some(())?;
        (scalar(other(add1, Binary::Add, out(erf))?)? == 1.0).then_some(())?;
        (other(mul, Binary::Mul, out(add1))? == x).then_some(())?;
        (scalar(other(half, Binary::Mul, out(mul))?)? == 0.5).then_some(())?;
        let readers_ok = g.users(x).iter().all(|&(u, _)| u == div || u == mul)
            && !k.outputs.contains(&x)
            && private(out(div), erf)
            && private(out(erf), add1)
            && private(out(add1), mul)
            && private(out(mul), half);
        readers_ok.then_some(())
    });
    Some(match chain {
        Some(()) => (bias, pgemm::ACT_GELU, 6),
        None => (bias, pgemm::ACT_NONE, 1),
    })
}

fn lower_gemm(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let sa = c.g.value(node.inputs[0]).ty.shape.clone();
    let sb = c.g.value(node.inputs[1]).ty.shape.clone();
    let (m, k) = if ta { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
    let n = if tb { sb[0] } else { sb[1] };
    let a_str = if ta { (1, m as i64) } else { (k as i64, 1) };
    let b_str = if tb { (1, k as i64) } else { (n as i64, 1) };
    let acc = acc_arg(c)?;
    let (a, b, out) = (
        e.bufs[c.arg(node.inputs[0])?],
        e.bufs[c.arg(node.inputs[1])?],
        e.bufs[acc],
    );
    let extra_v = match node.inputs.get(2) {
        Some(&cv) if beta != 0.0 => Some(cv),
        _ => None,
    };
    match (gemm_pack(c.g, c.k), c.prep.first()) {
        (Some(gp), Some(&pa)) => {
            let ap = e.bufs[pa];
            // The packed GEMM's rows: Gemm's columns for a weight B.
            let (rows, kdims, kb, kb_str, kc_str) = if gp.b_side {
                (n, (n, m, k), a, (a_str.1, a_str.0), (1, n as i64))
            } else {
                (m, (m, n, k), b, b_str, (n as i64, 1))
            };
            // C fuses as a per-row bias: `[n]`/`[1, n]` for a weight B,
            // `[m, 1]` for a weight A, with beta 1.
            let bias_fits = |v: ValueId| {
                let t = &c.g.value(v).ty;
                let per_row = if gp.b_side {
                    t.shape == [rows] || t.shape == [1, rows]
                } else {
                    t.shape == [rows, 1]
                };
                beta == 1.0 && t.dtype == DType::F32 && per_row
            };
            let fused = match extra_v {
                None => match_fused(c, None),
                Some(cv) if bias_fits(cv) => match_fused(c, Some(cv)),
                _ => None,
            };
            if let Some(f) = fused {
                let bias = match f.bias {
                    Some(v) => Some(e.bufs[c.arg(v)?]),
                    None => None,
                };
                let res = match f.res {
                    Some(v) => Some((e.bufs[c.arg(v)?], kc_str)),
                    None => None,
                };
                let d = ep_desc(e, bias, res, (f.lo, f.hi, f.act));
                sgemm_packed_ep(e, kdims, ap, kb, kb_str, out, kc_str, d);
                return Ok(());
            }
            if gp.b_side {
                // Cᵀ (n x m) = op(B)ᵀ · op(A)ᵀ, written through C's strides.
                let at_str = (a_str.1, a_str.0);
                sgemm_packed(e, (n, m, k), ap, a, at_str, out, (1, n as i64), false);
            } else {
                sgemm_packed(e, (m, n, k), ap, b, b_str, out, (n as i64, 1), false);
            }
        }
        _ => sgemm(e, (m, n, k), a, a_str, b, b_str, out, (n as i64, 1), alpha),
    }
    let extra = extra_v.map(|cv| (cv, c.g.value(cv).ty.shape.clone(), beta));
    if let Some(spec) = epilogue(c, acc, extra)? {
        let sub = SubDomain::full(&spec.domain);
        elementwise::emit(e, &spec, &sub)?;
    }
    Ok(())
}

fn lower_matmul(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let mut sa = c.g.value(node.inputs[0]).ty.shape.clone();
    let mut sb = c.g.value(node.inputs[1]).ty.shape.clone();
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let n = sb[sb.len() - 1];
    let batch = dnnc_ir::infer::broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    let bs_a = bcast_strides(&sa[..sa.len() - 2], &batch).ok_or("A batch does not broadcast")?;
    let bs_b = bcast_strides(&sb[..sb.len() - 2], &batch).ok_or("B batch does not broadcast")?;
    let out_b = contiguous(&batch);
    let (mk, kn, mn) = ((m * k) as i64, (k * n) as i64, (m * n) as i64);
    let sa_: Vec<i64> = bs_a.iter().map(|s| s * mk).collect();
    let sb_: Vec<i64> = bs_b.iter().map(|s| s * kn).collect();
    let so_: Vec<i64> = out_b.iter().map(|s| s * mn).collect();
    let acc = acc_arg(c)?;
    let (a, b, out) = (
        e.bufs[c.arg(node.inputs[0])?],
        e.bufs[c.arg(node.inputs[1])?],
        e.bufs[acc],
    );
    let packed = gemm_pack(c.g, c.k).zip(c.prep.first().map(|&p| e.bufs[p]));
    if let Some((gp, ap)) = packed.as_ref().filter(|(gp, _)| gp.b_side) {
        // A weight B (k x n, no batch): the batch of A folds into its rows;
        // Cᵀ (n x batch*m) = Bᵀ · Aᵀ.
        let bm = batch.iter().product::<usize>() * m;
        // Its bias and GELU applied as the GEMM stores, where it can.
        let fused = matmul_epilogue(c.g, c.k, gp);
        let mode = match fused {
            Some((bias, act, _)) => {
                let bias = e.bufs[c.arg(bias)?];
                ep_desc(e, Some(bias), None, (f32::NEG_INFINITY, f32::INFINITY, act))
            }
            None => e.ci(0),
        };
        sgemm_packed_ep(
            e,
            (gp.m, bm, k),
            *ap,
            a,
            (1, k as i64),
            out,
            (1, n as i64),
            mode,
        );
        let skip = fused.map_or(0, |f| f.2);
        if let Some(spec) = epilogue_after(c, acc, skip)? {
            let sub = SubDomain::full(&spec.domain);
            elementwise::emit(e, &spec, &sub)?;
        }
        return Ok(());
    }
    let ap = packed.map(|(_, ap)| ap);
    e.for_nest(&batch, &mut |e, idx| {
        let oa = e.linear(None, idx, &sa_);
        let ob = e.linear(None, idx, &sb_);
        let oo = e.linear(None, idx, &so_);
        let (pa, pb, po) = (at(e, a, oa), at(e, b, ob), at(e, out, oo));
        match ap {
            // A weight A (m x k, no batch), the same packed buffer for every
            // batch of B.
            Some(ap) => sgemm_packed(
                e,
                (m, n, k),
                ap,
                pb,
                (n as i64, 1),
                po,
                (n as i64, 1),
                false,
            ),
            None => sgemm(
                e,
                (m, n, k),
                pa,
                (k as i64, 1),
                pb,
                (n as i64, 1),
                po,
                (n as i64, 1),
                1.0,
            ),
        }
    });
    if let Some(spec) = epilogue(c, acc, None)? {
        let sub = SubDomain::full(&spec.domain);
        elementwise::emit(e, &spec, &sub)?;
    }
    Ok(())
}

fn lower_conv(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    let geom = ConvGeom::of_node(c.g, c.k.nodes[0])?;
    if super::blocked::is_blocked(&geom) {
        if !c.k.prologue.is_empty() {
            return Err("a channel-blocked conv takes no prologue".into());
        }
        if let Some(m) = super::fastconv::blocked_m(&geom) {
            if let Some(why) = dnnc_passes::block_channels::unfit(&geom) {
                return Err(why);
            }
            super::fastconv::lower(e, c, &geom, m)?;
            return Ok(vec![PACKED_MISMATCH.to_string()]);
        }
        return super::blocked::lower(e, c, &geom);
    }
    if super::into_blocked::runs(&geom) {
        if !c.k.prologue.is_empty() {
            return Err("a conv into the blocked layout takes no prologue".into());
        }
        return super::into_blocked::lower(e, c, &geom);
    }
    let algo = choose_algo(&geom, c.g, c.k, c.opts);
    if super::group8::runs(&geom, algo) {
        return super::group8::lower(e, c, &geom);
    }
    if super::dw8::runs(&geom, algo) {
        return super::dw8::lower(e, c, &geom);
    }
    if let Some(m) = algo.wino_m() {
        super::fastconv::lower(e, c, &geom, m)?;
        return Ok(vec![PACKED_MISMATCH.to_string()]);
    }
    let node = c.g.node(c.k.nodes[0]);
    // Plane strides of the data input and of what the kernel writes (the
    // conv's result, or an absorbed pool's), padded where `planes` chose.
    let written = match c.k.pool.first() {
        Some(&p) => c.g.node(p).outputs[0],
        None => *c.k.outputs.first().ok_or("a conv kernel without results")?,
    };
    let strides = (c.plane_stride(node.inputs[0]), c.plane_stride(written));
    // An absorbed max pool: the kernel writes the pool's output, the
    // conv's rows go to a scratch.
    let pool = pool_bands(c.g, c.k, &geom);
    let acc = match (c.k.pool.first(), &pool) {
        (None, _) => acc_arg(c)?,
        (Some(&p), Some(_)) if algo == ConvAlgo::Im2col => c.arg(c.g.node(p).outputs[0])?,
        (Some(_), _) => return Err("an absorbed max pool needs an im2col conv it can band".into()),
    };
    let bias = node.inputs.get(2).map(|&b| (b, vec![geom.m, 1, 1], 1.0f32));
    let bias_v = node.inputs.get(2).copied();
    let bias_fits = bias_v.is_none_or(|b| {
        let t = &c.g.value(b).ty;
        t.dtype == DType::F32 && t.shape == [geom.m]
    });
    let fused = if conv_packed(c.g, c.k, algo) && bias_fits {
        match_fused(c, bias_v)
    } else {
        None
    };
    let spec = if fused.is_some() {
        None
    } else if pool.is_some() {
        return Err("an absorbed max pool needs the conv's epilogue fused into its GEMM".into());
    } else {
        epilogue(c, acc, bias)?
    };
    // With a prologue the conv reads the prologue's input; the packed
    // GEMM transforms it as it packs it (see `group::absorb_prologues`).
    let pro = match super::group::prologue_of(c.g, &c.k.prologue) {
        Some((bn, lo, hi)) if algo == ConvAlgo::Pointwise && geom.g == 1 => {
            let scale = e.bufs[*c.prep.get(1).ok_or("missing prologue scale")?];
            let shift = e.bufs[*c.prep.get(2).ok_or("missing prologue shift")?];
            let desc = ProDesc {
                scale,
                shift,
                lo,
                hi,
            };
            Some((c.g.node(bn).inputs[0], desc))
        }
        Some(_) => return Err("a prologue needs a pointwise conv of one group".into()),
        None if !c.k.prologue.is_empty() => return Err("unsupported prologue".into()),
        None => None,
    };
    let xv = pro.map_or(node.inputs[0], |(v, _)| v);
    let strides = (pro.map_or(strides.0, |(v, _)| c.plane_stride(v)), strides.1);
    // An absorbed Concat (`group::absorb_concats`): the GEMM's B rows come
    // from its operands (buffer, channels), dense planes each.
    let cat = match c.k.concat {
        Some(cn) => {
            if algo != ConvAlgo::Pointwise || geom.g != 1 || !conv_packed(c.g, c.k, algo) {
                return Err("an absorbed concat needs a packed pointwise conv of one group".into());
            }
            let mut parts = Vec::new();
            for &v in &c.g.node(cn).inputs {
                if c.plane_stride(v) != geom.h * geom.w {
                    return Err("an absorbed concat's operand has padded planes".into());
                }
                parts.push((e.bufs[c.arg(v)?], c.g.value(v).ty.shape[1]));
            }
            if parts.iter().map(|p| p.1).sum::<usize>() != geom.c {
                return Err("an absorbed concat's operands do not make the conv's channels".into());
            }
            Some(parts)
        }
        None => None,
    };
    let dense = (geom.h * geom.w, geom.oh * geom.ow);
    let dense_pool = pool.as_ref().map(|pb| pb.ohp * pb.owp);
    let strided = match algo {
        ConvAlgo::Pointwise => spec.is_none(),
        ConvAlgo::Im2col => strides.0 == dense.0 && pool.is_some(),
        _ => false,
    };
    if !strided && (strides.0 != dense.0 || strides.1 != dense_pool.unwrap_or(dense.1)) {
        return Err(format!(
            "padded planes need a pointwise conv with its epilogue in the GEMM (this is {algo:?})"
        ));
    }
    let x = match &cat {
        Some(parts) => parts[0].0,
        None => e.bufs[c.arg(xv)?],
    };
    let w = e.bufs[c.arg(node.inputs[1])?];
    let y = e.bufs[acc];
    let pro = pro.map(|(_, p)| p);
    match algo {
        ConvAlgo::Depthwise | ConvAlgo::Direct => conv_direct(e, &geom, x, w, y, spec.as_ref())?,
        ConvAlgo::Fft => return super::fastconv::lower_fft(e, c, &geom, y, spec.as_ref()),
        algo => {
            let col = match algo {
                ConvAlgo::Im2col => {
                    let ws = *c.ws.first().ok_or("missing im2col workspace")?;
                    Some((ws, e.bufs[ws]))
                }
                _ => None,
            };
            let packed = if conv_packed(c.g, c.k, algo) {
                let (cg, mg) = geom.per_group();
                let layout = conv_layout(&geom, c.g, c.k, algo);
                let stride = packed_stride_in(layout, mg, cg * geom.kh * geom.kw);
                Some((
                    e.bufs[*c.prep.first().ok_or("missing packed filter")?],
                    stride,
                ))
            } else {
                None
            };
            // The gathered B's row offsets (see `gather_rows`).
            let rows_tab = if gathered(&geom, c.g, c.k, algo) {
                Some(e.bufs[*c.prep.get(1).ok_or("missing gather row table")?])
            } else {
                None
            };
            let ep = match &fused {
                Some(f) => {
                    let bias = match f.bias {
                        Some(v) => Some(e.bufs[c.arg(v)?]),
                        None => None,
                    };
                    let res = match f.res {
                        Some(v) => Some(e.bufs[c.arg(v)?]),
                        None => None,
                    };
                    Some(ConvEp {
                        bias,
                        res,
                        lo: f.lo,
                        hi: f.hi,
                        act: f.act,
                        pro,
                    })
                }
                // A prologue alone: the epilogue's steps are identities.
                None => pro.map(|pro| ConvEp {
                    bias: None,
                    res: None,
                    lo: f32::NEG_INFINITY,
                    hi: f32::INFINITY,
                    act: pgemm::ACT_NONE,
                    pro: Some(pro),
                }),
            };
            let pool = match &pool {
                Some(pb) => {
                    let ws = *c.ws.get(1).ok_or("missing pool band scratch")?;
                    Some((pb, (ws, e.bufs[ws])))
                }
                None => None,
            };
            conv_gemm(
                e,
                &geom,
                x,
                w,
                y,
                (col, packed, rows_tab),
                spec.as_ref(),
                ep,
                pool,
                strides,
                cat.as_deref(),
            )?;
            return Ok(vec![PACKED_MISMATCH.to_string()]);
        }
    }
    Ok(Vec::new())
}

/// Runs the epilogue on output channels `[m0, m0 + mg)` of image `n`.
pub(crate) fn tile_epilogue(
    e: &mut Emit<'_>,
    spec: Option<&elementwise::EwSpec<'_>>,
    n: Value,
    m0: Value,
    mg: usize,
) -> Result<(), String> {
    let Some(spec) = spec else {
        return Ok(());
    };
    let d = &spec.domain;
    let sub = SubDomain {
        starts: vec![Some(n), Some(m0), None, None],
        lens: vec![1, mg, d[2], d[3]],
    };
    elementwise::emit(e, spec, &sub)
}

/// Bytes of im2col columns one chunk aims for: the chunk (`K x cols`)
/// stays in L2 next to the packed filter while its GEMM runs (ResNet-18's
/// 7x7 stem: 147 x 784 columns instead of 147 x 12544).
const IM2COL_CHUNK_BYTES: usize = 512 * 1024;

/// Output rows per im2col chunk: about [`IM2COL_CHUNK_BYTES`] of columns,
/// at least 256 and at most 1024 columns where whole rows allow, evened
/// out so the chunks are about the same size (they are the units a split
/// kernel shares out, see [`conv_gemm`]); an odd count of chunks is made
/// even where the rows allow, so two tasks get equal shares (SqueezeNet's
/// stem: 14 chunks of 8 rows instead of 13 of 9).
pub(crate) fn chunk_rows(geo: &ConvGeom) -> usize {
    let kk = (geo.c / geo.g * geo.kh * geo.kw).max(1);
    let oh = geo.oh.max(1);
    let cols = (IM2COL_CHUNK_BYTES / (kk * 4)).clamp(256, 1024);
    let rows = (cols / geo.ow.max(1)).max(1).min(oh);
    let mut chunks = oh.div_ceil(rows);
    if chunks > 1 && chunks % 2 == 1 && chunks < oh {
        chunks += 1;
    }
    oh.div_ceil(chunks)
}

/// A GEMM's A operand: a filter addressed by strides, or packed.
#[derive(Clone, Copy)]
enum AOp {
    Plain(Value, (i64, i64)),
    Packed(Value),
}

/// A conv's [`FusedEp`] with its operands' buffers (whole tensors).
#[derive(Clone, Copy)]
struct ConvEp {
    bias: Option<Value>,
    res: Option<Value>,
    lo: f32,
    hi: f32,
    act: u32,
    /// The prologue on B's rows, if any.
    pro: Option<ProDesc>,
}

/// `C = A · B` (no accumulation) through whichever native GEMM `a` needs;
/// `ep`: an epilogue descriptor ([`ep_desc`], packed A only).
#[allow(clippy::too_many_arguments)]
fn gemm_a(
    e: &mut Emit<'_>,
    dims: (usize, usize, usize),
    a: AOp,
    b: Value,
    b_str: (i64, i64),
    c: Value,
    c_str: (i64, i64),
    ep: Option<Value>,
) {
    match a {
        AOp::Plain(a, a_str) => sgemm(e, dims, a, a_str, b, b_str, c, c_str, 1.0),
        AOp::Packed(ap) => {
            let mode = ep.unwrap_or_else(|| e.ci(0));
            sgemm_packed_ep(e, dims, ap, b, b_str, c, c_str, mode)
        }
    }
}

/// The GEMM of image `n` of a pointwise conv that reads an absorbed
/// Concat ([`super::group::absorb_concats`]): B's rows are the channels
/// of the Concat's operands `parts` (buffer, channels) in order, so a row
/// table on the stack gives each row's offset in floats from the first
/// operand's buffer (operand `i`'s image `n` starts `n·Cᵢ·H·W` into its
/// buffer), and the gathered packed GEMM packs B from them, bitwise as
/// from the concatenation. `c`: C and its row stride.
fn concat_rows(
    e: &mut Emit<'_>,
    parts: &[(Value, usize)],
    n: Value,
    (m, cols, k): (usize, usize, usize),
    a: AOp,
    (c, c_rs): (Value, usize),
    ep: Option<Value>,
) -> Result<(), String> {
    let AOp::Packed(ap) = a else {
        return Err("an absorbed concat needs a packed filter".into());
    };
    let bytes = u32::try_from(k * 8).map_err(|_| "too many concat rows".to_string())?;
    let ss =
        e.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, bytes, 3));
    let tab = e.b.ins().stack_addr(I64, ss, 0);
    let base = parts[0].0;
    let mut row = 0usize;
    for &(buf, ch) in parts {
        let d = e.b.ins().isub(buf, base);
        let d = e.b.ins().sshr_imm_s(d, 2);
        let img = e.b.ins().imul_imm_s(n, (ch * cols) as i64);
        let first = e.b.ins().iadd(d, img);
        let (s, en) = (e.ci(0), e.ci(ch as i64));
        e.for_range(s, en, 1, |e, ci| {
            let o = e.b.ins().imul_imm_s(ci, cols as i64);
            let o = e.b.ins().iadd(first, o);
            let at = e.b.ins().imul_imm_s(ci, 8);
            let at = e.b.ins().iadd_imm_s(at, (row * 8) as i64);
            let p = e.b.ins().iadd(tab, at);
            e.b.ins().store(super::emit::mem(), o, p, 0);
        });
        row += ch;
    }
    let gd = gather_desc(e, base, tab, (cols, 0), strip_panels(false));
    let mode = ep.unwrap_or_else(|| e.ci(0));
    sgemm_packed_gather(e, (m, cols, k), ap, gd, c, (c_rs as i64, 1), mode);
    Ok(())
}

/// [`conv_gemm`]'s operands besides the input: the im2col workspace (id,
/// buffer), the packed filter with its per-group stride in floats, and
/// the gathered B's row-offset table.
type GemmOperands = (
    Option<(usize, Value)>,
    Option<(Value, usize)>,
    Option<Value>,
);

/// Im2col (or pointwise, with `col == None`) + GEMM per (image, group),
/// each followed by its epilogue. Im2col runs in chunks of whole output
/// rows ([`chunk_rows`]): pack the chunk's columns, GEMM them straight into
/// their columns of the output, next chunk. `packed`: the filter packed at
/// compile time, one block per group ([`packed_stride_in`] apart). `ep`: the
/// epilogue fused into the packed GEMM (each GEMM, a chunk of columns of
/// one group's rows, applies it to exactly the elements it writes), with
/// `spec` then `None`.
///
/// Split across tasks: when the epilogue is fused (or absent) and there
/// are at least two (image, group, chunk) units, the kernel splits over
/// those units ([`Emit::task_range`]), each task packing into its own
/// slice of the column workspace ([`Emit::task_slice`]) and running its
/// GEMMs on its thread; every unit is computed by the same code, so any
/// split is bitwise the one-task result. A single chunk (one image and
/// group) of an even number of output rows is two units, its halves, and
/// a task given both runs the whole chunk as one GEMM (each element's k
/// order is the same either way). Otherwise (an unfused epilogue run per
/// group, a single chunk of odd height) the GEMMs split themselves.
#[allow(clippy::too_many_arguments)]
fn conv_gemm(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    (col, packed, rows_tab): GemmOperands,
    spec: Option<&elementwise::EwSpec<'_>>,
    ep: Option<ConvEp>,
    pool: Option<(&PoolBands, (usize, Value))>,
    (xs, ys): (usize, usize),
    cat: Option<&[(Value, usize)]>,
) -> Result<(), String> {
    let (cg, mg) = (geo.c / geo.g, geo.m / geo.g);
    if cat.is_some() && (col.is_some() || pool.is_some()) {
        return Err("an absorbed concat needs a pointwise conv".into());
    }
    let kk = cg * geo.kh * geo.kw;
    let p = geo.oh * geo.ow;
    // The planes' strides: `xs` the input's, `ys` the result's (or the
    // absorbed pool's); the im2col paths read dense planes.
    let hw = xs as i64;
    let rows = chunk_rows(geo);
    // Per (image, group): its input, filter, output rows and fused
    // epilogue operands.
    let group = |e: &mut Emit<'_>, n: Value, gi: Value| {
        // x + (n*C + gi*cg) * H*W
        let t = e.b.ins().imul_imm_s(n, geo.c as i64);
        let t2 = e.b.ins().imul_imm_s(gi, cg as i64);
        let cbase = e.b.ins().iadd(t, t2);
        let xoff = e.b.ins().imul_imm_s(cbase, hw);
        let xg = at(e, x, xoff);
        let a = match packed {
            Some((pb, pstride)) => {
                let off = e.b.ins().imul_imm_s(gi, pstride as i64);
                AOp::Packed(at(e, pb, off))
            }
            None => {
                let woff = e.b.ins().imul_imm_s(gi, (mg * kk) as i64);
                AOp::Plain(at(e, w, woff), (kk as i64, 1))
            }
        };
        let t = e.b.ins().imul_imm_s(n, geo.m as i64);
        let m0 = e.b.ins().imul_imm_s(gi, mg as i64);
        let mrow = e.b.ins().iadd(t, m0);
        let yoff = e.b.ins().imul_imm_s(mrow, ys as i64);
        let yg = at(e, y, yoff);
        // This group's bias rows and residual plane.
        let epg = ep.map(|f| {
            let bias = f.bias.map(|b| at(e, b, m0));
            // A residual operand is never padded (`planes`).
            let roff = e.b.ins().imul_imm_s(mrow, p as i64);
            let res = f.res.map(|r| at(e, r, roff));
            (bias, res, (f.lo, f.hi, f.act), f.pro)
        });
        (xg, a, yg, m0, epg)
    };
    type EpG = Option<(
        Option<Value>,
        Option<Value>,
        (f32, f32, u32),
        Option<ProDesc>,
    )>;
    let desc = |e: &mut Emit<'_>, epg: EpG, col0: Option<Value>| {
        epg.map(|(bias, res, lh, pro)| {
            let res = res.map(|r| match col0 {
                Some(o) => at(e, r, o),
                None => r,
            });
            ep_desc_pro(e, bias, res.map(|r| (r, (p as i64, 1))), lh, pro)
        })
    };
    // Pack a chunk of output rows, GEMM it into its output columns, or
    // into `dst` (C's first element and row stride) when given. (The
    // epilogue per chunk measured slower than once per group: ResNet-18
    // stem 2.31 vs 2.24 ms.)
    let most = strip_panels(pool.is_some());
    let chunk_to = |e: &mut Emit<'_>,
                    g: (Value, AOp, Value, EpG),
                    col: Value,
                    (r0, rows): (Value, usize),
                    dst: Option<(Value, usize)>| {
        let (xg, a, yg, epg) = g;
        let yo = e.b.ins().imul_imm_s(r0, geo.ow as i64);
        let (yc, c_str) = match dst {
            Some((cp, rs)) => (cp, (rs as i64, 1)),
            None => (at(e, yg, yo), (p as i64, 1)),
        };
        let nc = rows * geo.ow;
        if let (Some(tab), AOp::Packed(ap)) = (rows_tab, a) {
            // Implicit im2col: the GEMM packs B from the phase rows.
            im2col_phased(e, geo, xg, col, cg, r0, rows, true);
            let d = desc(e, epg, Some(yo));
            let (rs, _) = phase_row(geo);
            let gd = gather_desc(e, col, tab, (geo.ow, 2 * rs), most);
            let mode = d.unwrap_or_else(|| e.ci(0));
            sgemm_packed_gather(e, (mg, nc, kk), ap, gd, yc, c_str, mode);
            return;
        }
        if phased(geo) {
            im2col_phased(e, geo, xg, col, cg, r0, rows, false);
        } else {
            im2col_rows(e, geo, xg, col, cg, r0, rows);
        }
        let d = desc(e, epg, Some(yo));
        let ld = col_ld(nc) as i64;
        gemm_a(e, (mg, nc, kk), a, col, (ld, 1), yc, c_str, d);
    };
    let chunk =
        |e: &mut Emit<'_>, g: (Value, AOp, Value, EpG), col: Value, r0: Value, rows: usize| {
            chunk_to(e, g, col, (r0, rows), None)
        };
    if let Some((pb, scratch)) = pool {
        // The conv in bands of the absorbed max pool's rows (see
        // `conv_pool`): units are (image, band); a task runs its bands in
        // order, each computing its conv rows into the task's scratch
        // (taking over the rows it shares with the band before when this
        // task ran that one), then pooling them into the output.
        let (ws, col) = col.ok_or("an absorbed max pool needs the im2col workspace")?;
        let (lo, hi) = e.task_range(geo.n * pb.nb, "bands of pool rows (images x bands)")?;
        let col = e.task_slice(ws, col, im2col_ws_bytes(geo, rows_tab.is_some()));
        let scr = e.task_slice(scratch.0, scratch.1, pb.scratch_bytes(geo));
        let plane = pb.rs * geo.ow;
        let mut err = None;
        e.for_range(lo, hi, 1, |e, u| {
            let n = e.b.ins().udiv_imm_u(u, pb.nb as i64);
            let b = e.b.ins().urem_imm_u(u, pb.nb as i64);
            let zero = e.ci(0);
            let g = group(e, n, zero);
            let g = (g.0, g.1, g.2, g.4);
            // Conv rows `[s, band.rows)` of a band starting at conv row
            // `a0`, into its scratch rows, a GEMM per im2col chunk.
            let conv_rows = |e: &mut Emit<'_>, s: usize, band: &Band, a0: Value| {
                for s0 in (s..band.rows).step_by(pb.chunk) {
                    let r0 = e.b.ins().iadd_imm_s(a0, s0 as i64);
                    let cp = e.b.ins().iadd_imm_s(scr, (s0 * geo.ow * 4) as i64);
                    let dst = Some((cp, plane));
                    chunk_to(e, g, col, (r0, pb.chunk.min(band.rows - s0)), dst);
                }
            };
            #[derive(Clone, Copy, PartialEq)]
            enum Class {
                First,
                Mid,
                Last,
            }
            let body = |e: &mut Emit<'_>, class: Class| -> Result<(), String> {
                let band = match class {
                    Class::First => pb.first,
                    Class::Mid => pb.mid.ok_or("no middle bands")?,
                    Class::Last => pb.last,
                };
                // Band 0 starts at conv row 0, the others at b·r·s - pt.
                let (a0, q0) = if class == Class::First {
                    (e.ci(0), e.ci(0))
                } else {
                    let a0 = e.b.ins().imul_imm_s(b, (pb.r * pb.p.strides[0]) as i64);
                    let a0 = e.b.ins().iadd_imm_s(a0, -(pb.p.pads[0] as i64));
                    (a0, e.b.ins().imul_imm_s(b, pb.r as i64))
                };
                if class == Class::First || pb.ov == 0 {
                    conv_rows(e, 0, &band, a0);
                } else {
                    // The band before ran on this task unless this is the
                    // task's first unit (band 0 never takes rows over).
                    let carry = e.b.create_block();
                    let fresh = e.b.create_block();
                    let done = e.b.create_block();
                    let taken = e.b.ins().icmp(IntCC::NotEqual, u, lo);
                    e.b.ins().brif(taken, carry, &[], fresh, &[]);
                    e.b.switch_to_block(carry);
                    let mid_rows = pb.mid.map_or(pb.first.rows, |m| m.rows);
                    let prev = match (class, pb.mid.is_some()) {
                        (Class::Mid, _) => {
                            let second = e.b.ins().icmp_imm_s(IntCC::Equal, b, 1);
                            let f = e.ci(pb.first.rows as i64);
                            let m = e.ci(mid_rows as i64);
                            e.b.ins().select(second, f, m)
                        }
                        (_, true) => e.ci(mid_rows as i64),
                        (_, false) => e.ci(pb.first.rows as i64),
                    };
                    let src = e.b.ins().iadd_imm_s(prev, -(pb.ov as i64));
                    let src = e.b.ins().imul_imm_s(src, geo.ow as i64);
                    e.for_n(geo.m, |e, m| {
                        let d0 = e.b.ins().imul_imm_s(m, plane as i64);
                        let s0 = e.b.ins().iadd(d0, src);
                        copy_contiguous(e, scr, d0, scr, s0, pb.ov * geo.ow);
                    });
                    conv_rows(e, pb.ov, &band, a0);
                    e.b.ins().jump(done, &[]);
                    e.b.switch_to_block(fresh);
                    conv_rows(e, 0, &band, a0);
                    e.b.ins().jump(done, &[]);
                    e.b.switch_to_block(done);
                }
                // Pool the band from the scratch into its output rows.
                let yo = e.b.ins().imul_imm_s(n, (geo.m * ys) as i64);
                let qo = e.b.ins().imul_imm_s(q0, pb.owp as i64);
                let frame = super::reduce::Frame {
                    planes: geo.m,
                    x0: e.ci(0),
                    x_plane: plane,
                    y0: e.b.ins().iadd(yo, qo),
                    y_plane: ys,
                };
                let bp = pb.band_pool(&band, class == Class::Last);
                let xs = [1, geo.m, band.rows, geo.ow];
                let ys = [1, geo.m, band.qn, pb.owp];
                super::reduce::max_pool_band(e, &bp, &xs, &ys, scr, y, frame)
            };
            let mut run = |e: &mut Emit<'_>, class: Class| {
                if let Err(m) = body(e, class) {
                    err.get_or_insert(m);
                }
            };
            if pb.nb == 1 {
                run(e, Class::First);
                return;
            }
            let first = e.b.create_block();
            let later = e.b.create_block();
            let last = e.b.create_block();
            let done = e.b.create_block();
            let is_first = e.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
            e.b.ins().brif(is_first, first, &[], later, &[]);
            e.b.switch_to_block(first);
            run(e, Class::First);
            e.b.ins().jump(done, &[]);
            e.b.switch_to_block(later);
            if pb.mid.is_some() {
                let mid = e.b.create_block();
                let is_last = e.b.ins().icmp_imm_s(IntCC::Equal, b, (pb.nb - 1) as i64);
                e.b.ins().brif(is_last, last, &[], mid, &[]);
                e.b.switch_to_block(mid);
                run(e, Class::Mid);
                e.b.ins().jump(done, &[]);
            } else {
                e.b.ins().jump(last, &[]);
            }
            e.b.switch_to_block(last);
            run(e, Class::Last);
            e.b.ins().jump(done, &[]);
            e.b.switch_to_block(done);
        });
        return err.map_or(Ok(()), Err);
    }
    let chunks = geo.oh.div_ceil(rows);
    let full = geo.oh / rows;
    let units = geo.n * geo.g * chunks;
    let even = geo.oh >= 2 && geo.oh.is_multiple_of(2);
    if let (Some((ws, col)), None, true) = (col, spec, units == 1 && even) {
        // One chunk of an even number of rows: two units, its halves of
        // output rows, so two tasks share it; a task given both packs and
        // multiplies the whole chunk at once (as halves, the smaller GEMMs
        // measured 5% slower at one thread). ResNet-18's 14x14 convs had
        // only the GEMM split, both threads reading the columns one of them
        // packed. An odd count splits unevenly (7 rows as 4 + 3), so there
        // the GEMM splits itself, over output channels where it has more
        // panels than column tiles: ResNet-18's 7x7 layer4.0 conv1 at two
        // threads 0.666 → 0.569 ms, its downsample 0.093 → 0.088 (whole
        // runs 11.12 → 10.91 ms, medians of 5 alternating).
        let (lo, hi) = e.task_range(2, "halves of the output rows")?;
        let col = e.task_slice(ws, col, im2col_ws_bytes(geo, rows_tab.is_some()));
        let zero = e.ci(0);
        let (xg, a, yg, _, epg) = group(e, zero, zero);
        let half = geo.oh.div_ceil(2);
        let whole = e.b.create_block();
        let one = e.b.create_block();
        let first = e.b.create_block();
        let second = e.b.create_block();
        let done = e.b.create_block();
        let n_units = e.b.ins().isub(hi, lo);
        let both = e.b.ins().icmp_imm_s(IntCC::Equal, n_units, 2);
        e.b.ins().brif(both, whole, &[], one, &[]);
        e.b.switch_to_block(whole);
        chunk(e, (xg, a, yg, epg), col, zero, geo.oh);
        e.b.ins().jump(done, &[]);
        e.b.switch_to_block(one);
        let is_second = e.b.ins().icmp_imm_s(IntCC::Equal, lo, 1);
        e.b.ins().brif(is_second, second, &[], first, &[]);
        e.b.switch_to_block(first);
        chunk(e, (xg, a, yg, epg), col, zero, half);
        e.b.ins().jump(done, &[]);
        e.b.switch_to_block(second);
        let r0 = e.ci(half as i64);
        chunk(e, (xg, a, yg, epg), col, r0, geo.oh - half);
        e.b.ins().jump(done, &[]);
        e.b.switch_to_block(done);
        return Ok(());
    }
    if let (Some((ws, col)), None, true) = (col, spec, units >= 2) {
        let (lo, hi) = e.task_range(units, "column chunks (images x groups x row chunks)")?;
        let col = e.task_slice(ws, col, im2col_ws_bytes(geo, rows_tab.is_some()));
        e.for_range(lo, hi, 1, |e, u| {
            let ng = e.b.ins().udiv_imm_u(u, chunks as i64);
            let c = e.b.ins().urem_imm_u(u, chunks as i64);
            let n = e.b.ins().udiv_imm_u(ng, geo.g as i64);
            let gi = e.b.ins().urem_imm_u(ng, geo.g as i64);
            let (xg, a, yg, _, epg) = group(e, n, gi);
            let r0 = e.b.ins().imul_imm_s(c, rows as i64);
            if full == chunks {
                chunk(e, (xg, a, yg, epg), col, r0, rows);
            } else {
                // The last chunk is shorter.
                let whole = e.b.create_block();
                let last = e.b.create_block();
                let done = e.b.create_block();
                let is_last = e.b.ins().icmp_imm_s(IntCC::Equal, c, full as i64);
                e.b.ins().brif(is_last, last, &[], whole, &[]);
                e.b.switch_to_block(whole);
                chunk(e, (xg, a, yg, epg), col, r0, rows);
                e.b.ins().jump(done, &[]);
                e.b.switch_to_block(last);
                chunk(e, (xg, a, yg, epg), col, r0, geo.oh - full * rows);
                e.b.ins().jump(done, &[]);
                e.b.switch_to_block(done);
            }
        });
        return Ok(());
    }
    let no_prologue = ep.as_ref().is_none_or(|f| f.pro.is_none());
    if col.is_none()
        && cat.is_none()
        && spec.is_none()
        && no_prologue
        && p == 1
        && geo.g == 1
        && geo.n >= 2
    {
        // A 1x1 map (a squeeze-excitation conv, a conv after a global
        // pool): one GEMM whose columns are the images, `B[k][n] = x[n][k]`
        // and `C[m][n] = y[n][m]` through their strides, not one matrix-
        // vector product per image, each reading the whole filter
        // (RegNetY-400MF's 440 -> 110 + Relu at batch 8: 52 -> 20 us).
        let zero = e.ci(0);
        let (xg, a, yg, _, epg) = group(e, zero, zero);
        let d = epg.map(|(bias, res, lh, pro)| {
            ep_desc_pro(e, bias, res.map(|r| (r, (1, geo.m as i64))), lh, pro)
        });
        let (xs, ys) = (xs as i64, ys as i64);
        let b_str = (xs, geo.c as i64 * xs);
        let c_str = (ys, geo.m as i64 * ys);
        gemm_a(e, (geo.m, geo.n, kk), a, xg, b_str, yg, c_str, d);
        return Ok(());
    }
    if let (None, true) = (col, geo.n * geo.g >= 2) {
        // Pointwise over several images (or groups): each (image, group)
        // is one whole GEMM and its epilogue, so the kernel splits over
        // them, each task running its GEMMs on its own thread (a batch-8
        // bottleneck's 64 x 64 x 64 GEMMs are each too small to split
        // themselves).
        let (lo, hi) = e.task_range(geo.n * geo.g, "GEMMs (images x groups)")?;
        let mut err = None;
        e.for_range(lo, hi, 1, |e, u| {
            let n = e.b.ins().udiv_imm_u(u, geo.g as i64);
            let gi = e.b.ins().urem_imm_u(u, geo.g as i64);
            let (xg, a, yg, m0, epg) = group(e, n, gi);
            let d = desc(e, epg, None);
            let run = match cat {
                Some(parts) => concat_rows(e, parts, n, (mg, p, kk), a, (yg, ys), d),
                None => {
                    gemm_a(e, (mg, p, kk), a, xg, (xs as i64, 1), yg, (ys as i64, 1), d);
                    Ok(())
                }
            };
            if let Err(m) = run.and_then(|()| tile_epilogue(e, spec, n, m0, mg)) {
                err.get_or_insert(m);
            }
        });
        return err.map_or(Ok(()), Err);
    }
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.g, |e, gi| {
            let (xg, a, yg, m0, epg) = group(e, n, gi);
            match col {
                // Pointwise: one GEMM over the whole plane (chunking it with
                // the epilogue per chunk measured slower: MobileNet-V2
                // 16->96 at 112x112, 0.81 vs 0.66 ms).
                None => {
                    let d = desc(e, epg, None);
                    if let Some(parts) = cat {
                        if let Err(m) = concat_rows(e, parts, n, (mg, p, kk), a, (yg, ys), d) {
                            err.get_or_insert(m);
                        }
                    } else {
                        gemm_a(e, (mg, p, kk), a, xg, (xs as i64, 1), yg, (ys as i64, 1), d)
                    }
                }
                Some((_, col)) => {
                    if full > 0 {
                        let s0 = e.ci(0);
                        let s1 = e.ci((full * rows) as i64);
                        e.for_range(s0, s1, rows as i64, |e, r0| {
                            chunk(e, (xg, a, yg, epg), col, r0, rows)
                        });
                    }
                    if full < chunks {
                        let r0 = e.ci((full * rows) as i64);
                        chunk(e, (xg, a, yg, epg), col, r0, geo.oh - full * rows);
                    }
                }
            }
            if let Err(m) = tile_epilogue(e, spec, n, m0, mg) {
                err.get_or_insert(m);
            }
        });
    });
    err.map_or(Ok(()), Err)
}

/// Static range of output positions `o` whose input position
/// `o * stride - pad + tap * dil` lies in `[0, size)`.
pub(crate) fn valid_range(
    out: usize,
    size: usize,
    stride: usize,
    pad: usize,
    tap: usize,
    dil: usize,
) -> (usize, usize) {
    let off = tap as i64 * dil as i64 - pad as i64;
    let (s, size) = (stride as i64, size as i64);
    // o*s + off >= 0  =>  o >= ceil(-off / s)
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    // o*s + off <= size - 1  =>  o <= floor((size - 1 - off) / s)
    let hi = if size - 1 - off < 0 {
        0
    } else {
        (size - 1 - off) / s + 1
    };
    let lo = lo.clamp(0, out as i64) as usize;
    let hi = hi.clamp(0, out as i64) as usize;
    (lo, hi.max(lo))
}

/// Writes zeros to `len` f32s at element `start` of `base` (f32x4 + tail).
pub(crate) fn zero_run(e: &mut Emit<'_>, base: Value, start: Value, len: usize) {
    if len == 0 {
        return;
    }
    let z = e.vf(0.0);
    let zs = e.cf(0.0);
    let v_end = len / 4 * 4;
    if v_end > 0 {
        let s = e.ci(0);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| {
            let i = e.b.ins().iadd(start, j);
            e.store_v(z, base, i);
        });
    }
    for j in v_end..len {
        let i = e.b.ins().iadd_imm_s(start, j as i64);
        e.store_f32(zs, base, i);
    }
}

/// Runs up to this many elements are copied by straight-line code.
const SHORT_RUN: usize = 32;

/// Copies `len` f32s from `src[s0 + j*stride]` to `dst[d0 + j]`; `avail`
/// elements from `src[s0]` on may be read (stride 2 copies four per f32x4
/// through [`Emit::load_strided4`], which reads one past the last element
/// it keeps).
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_run(
    e: &mut Emit<'_>,
    dst: Value,
    d0: Value,
    src: Value,
    s0: Value,
    len: usize,
    stride: usize,
    avail: usize,
) {
    if len == 0 {
        return;
    }
    if stride == 1 && len >= 4 {
        copy_contiguous(e, dst, d0, src, s0, len);
        return;
    }
    let v_end = match stride {
        1 => len / 4 * 4,
        2 => {
            let span = super::emit::strided4_span(2);
            // Groups of four starting at j with j*2 + span <= avail.
            let by_reach = if avail >= span {
                (avail - span) / 8 + 1
            } else {
                0
            };
            (len / 4).min(by_reach) * 4
        }
        _ => 0,
    };
    // Short runs (the rows of small feature maps, e.g. LeNet's 10- and
    // 28-wide rows) as straight-line code: both addresses computed once,
    // every vector and tail element at an immediate offset, no loop.
    if len <= SHORT_RUN {
        let sp = e.addr(src, s0, 4);
        let dp = e.addr(dst, d0, 4);
        for j in (0..v_end).step_by(4) {
            let v = e.load_strided4(sp, j * stride, stride);
            e.b.ins().store(super::emit::mem(), v, dp, (4 * j) as i32);
        }
        for j in v_end..len {
            let v =
                e.b.ins()
                    .load(F32, super::emit::mem(), sp, (4 * j * stride) as i32);
            e.b.ins().store(super::emit::mem(), v, dp, (4 * j) as i32);
        }
        return;
    }
    // Four vectors per iteration, addresses computed once (immediate
    // offsets), then single vectors.
    let u_end = v_end / 16 * 16;
    if u_end > 0 {
        let s = e.ci(0);
        let en = e.ci(u_end as i64);
        e.for_range(s, en, 16, |e, j| {
            let t = e.b.ins().imul_imm_s(j, stride as i64);
            let si = e.b.ins().iadd(s0, t);
            let sp = e.addr(src, si, 4);
            let di = e.b.ins().iadd(d0, j);
            let dp = e.addr(dst, di, 4);
            for u in 0..4 {
                let v = e.load_strided4(sp, 4 * u * stride, stride);
                e.b.ins().store(super::emit::mem(), v, dp, (16 * u) as i32);
            }
        });
    }
    if v_end > u_end {
        let s = e.ci(u_end as i64);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| {
            // (Stride 1 with a whole vector went to `copy_contiguous`.)
            let t = e.b.ins().imul_imm_s(j, stride as i64);
            let si = e.b.ins().iadd(s0, t);
            let bp = e.addr(src, si, 4);
            let v = e.load_strided4(bp, 0, stride);
            let di = e.b.ins().iadd(d0, j);
            e.store_v(v, dst, di);
        });
    }
    if v_end < len {
        let s = e.ci(v_end as i64);
        let en = e.ci(len as i64);
        e.for_range(s, en, 1, |e, j| {
            let t = e.b.ins().imul_imm_s(j, stride as i64);
            let si = e.b.ins().iadd(s0, t);
            let v = e.load_f32(src, si);
            let di = e.b.ins().iadd(d0, j);
            e.store_f32(v, dst, di);
        });
    }
}

/// [`copy_run`] with stride 1 and `len >= 4`: whole vectors (straight-line
/// up to `4 * UNROLL` = 128 floats, a loop beyond, through the
/// padded-plane kernels' `counted`), then (when `len` is not a multiple of
/// 4) one vector ending at the last element, rewriting up to three
/// elements with the same values (`dst` and `src` must not overlap).
/// SqueezeNet's stem had 216 im2col rows of 111 floats per chunk, each a
/// loop of 4-vector steps, then 3 vectors, then 3 scalar copies.
fn copy_contiguous(e: &mut Emit<'_>, dst: Value, d0: Value, src: Value, s0: Value, len: usize) {
    let sp = e.addr(src, s0, 4);
    let dp = e.addr(dst, d0, 4);
    let copy = |e: &mut Emit<'_>, o: Value, d: i32| {
        let sq = e.b.ins().iadd(sp, o);
        let v = e.b.ins().load(types::F32X4, super::emit::mem(), sq, d);
        let dq = e.b.ins().iadd(dp, o);
        e.b.ins().store(super::emit::mem(), v, dq, d);
    };
    super::direct::counted(e, len / 4, 16, copy);
    if !len.is_multiple_of(4) {
        let z = e.ci(0);
        copy(e, z, ((len - 4) * 4) as i32);
    }
}

/// Floats per padded row of [`im2col_phased`]'s scratch (two phase rows
/// of `l` floats) and `l`.
fn phase_row(geo: &ConvGeom) -> (usize, usize) {
    let l = geo.ow + (geo.kw - 1) / 2;
    (2 * l, l)
}

/// Whether im2col goes through padded phase rows ([`im2col_phased`]):
/// stride 2 both ways, no dilation.
fn phased(geo: &ConvGeom) -> bool {
    geo.p.strides == [2, 2] && geo.p.dilations == [1, 1] && geo.kw >= 2
}

/// Row stride (floats) of an im2col chunk of `nc` columns: whole cache
/// lines, so the GEMM's 64-byte loads of B rows read in place never
/// straddle two lines (ResNet-18's 14x14 outputs: 196 columns, rows 784
/// bytes apart, every other row off a line).
fn col_ld(nc: usize) -> usize {
    nc.next_multiple_of(16)
}

/// Bytes of one task's im2col workspace: a chunk's columns, then (for
/// [`phased`] convs) its padded phase rows; only the phase rows when
/// `gather` ([`gathered`]: the GEMM reads B from them).
fn im2col_ws_bytes(geo: &ConvGeom, gather: bool) -> usize {
    let cg = geo.c / geo.g;
    let rows = chunk_rows(geo);
    let scratch = cg * phase_rows(geo) * phase_row(geo).0 * 4;
    if gather {
        return scratch;
    }
    let col = cg * geo.kh * geo.kw * col_ld(rows * geo.ow) * 4;
    if phased(geo) {
        col + scratch
    } else {
        col
    }
}

/// Padded input rows a full chunk of a [`phased`] conv reads: one
/// channel's block of its phase-row scratch.
fn phase_rows(geo: &ConvGeom) -> usize {
    2 * (chunk_rows(geo) - 1) + geo.kh
}

/// Whether an im2col conv runs as an implicit GEMM: the packed GEMM
/// gathers its B panels straight from the chunk's padded phase rows
/// ([`pgemm::Gather`]) and the column matrix is never written. Stride-2
/// convs with a filter packed at compile time whose GEMM goes strip by
/// strip ([`pgemm::gathered_strips`]: a k from
/// [`pgemm::STRIP_ORDER_MIN_K`], or up to three AVX-512 row panels);
/// otherwise the GEMM reads written columns in place panel by panel,
/// which measured faster than packing them from the phase rows
/// (SqueezeNet's stem, k = 27 over 64 rows: 0.40 vs 0.42 ms packed,
/// 0.37 vs 0.45 strip by strip; MobileNet-V2's, 32 rows, 0.23 vs 0.25
/// packed but 0.217 vs 0.200 strip by strip). A conv with an absorbed
/// max pool writes C into a band scratch that stays in cache, where strip
/// order pays up to [`pgemm::GATHER_STRIP_MAX_PANELS_CACHED_C`] panels.
fn gathered(geo: &ConvGeom, g: &Graph, k: &Kernel, algo: ConvAlgo) -> bool {
    algo == ConvAlgo::Im2col
        && conv_packed(g, k, algo)
        && phased(geo)
        && pgemm::gathered_strips(
            pgemm::Kernel::best(),
            geo.m / geo.g,
            geo.c / geo.g * geo.kh * geo.kw,
            strip_panels(!k.pool.is_empty()),
        )
}

/// The most AVX-512 row panels for which a conv's gathered GEMM goes
/// strip by strip (see [`gathered`]): more when it writes a pooled
/// conv's band scratch (`pooled`), which stays in cache.
fn strip_panels(pooled: bool) -> usize {
    if pooled {
        pgemm::GATHER_STRIP_MAX_PANELS_CACHED_C
    } else {
        pgemm::GATHER_STRIP_MAX_PANELS
    }
}

/// The gathered B's row offsets: row `(c, i, j)` (tap `(i, j)` of input
/// channel `c`) of output row 0 of a chunk starts at padded row `i` of
/// channel `c`'s block of phase rows, phase `j % 2`, index `j / 2`; output
/// row `r` of the chunk is `2r` padded rows on (the segment step).
fn gather_rows(geo: &ConvGeom) -> Vec<i64> {
    let (rs, l) = phase_row(geo);
    let block = phase_rows(geo) * rs;
    let cg = geo.c / geo.g;
    let mut offs = Vec::with_capacity(cg * geo.kh * geo.kw);
    for c in 0..cg {
        for i in 0..geo.kh {
            for j in 0..geo.kw {
                offs.push((c * block + i * rs + (j % 2) * l + j / 2) as i64);
            }
        }
    }
    offs
}

/// A [`pgemm::Gather`] on the stack: rows at `base + tab[k]`, segments of
/// `seg_len` floats `seg_step` apart, strip order up to `strip_panels`
/// row panels.
fn gather_desc(
    e: &mut Emit<'_>,
    base: Value,
    tab: Value,
    (seg_len, seg_step): (usize, usize),
    strip_panels: usize,
) -> Value {
    let size = std::mem::size_of::<pgemm::Gather>() as u32;
    let ss =
        e.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 3));
    let p = e.b.ins().stack_addr(I64, ss, 0);
    let fields = [
        (base, std::mem::offset_of!(pgemm::Gather, base)),
        (tab, std::mem::offset_of!(pgemm::Gather, row_off)),
        (
            e.ci(seg_len as i64),
            std::mem::offset_of!(pgemm::Gather, seg_len),
        ),
        (
            e.ci(seg_step as i64),
            std::mem::offset_of!(pgemm::Gather, seg_step),
        ),
        (
            e.ci(strip_panels as i64),
            std::mem::offset_of!(pgemm::Gather, strip_panels),
        ),
    ];
    for (v, off) in fields {
        e.b.ins().store(super::emit::mem(), v, p, off as i32);
    }
    p
}

/// Emits `dnnc_sgemm_packed_gather(ap, m, n, k, gather, c, .., mode)`,
/// failing with error code 1 as [`sgemm_packed_ep`] does.
fn sgemm_packed_gather(
    e: &mut Emit<'_>,
    (m, n, k): (usize, usize, usize),
    ap: Value,
    gather: Value,
    cp: Value,
    (c_rs, c_cs): (i64, i64),
    mode: Value,
) {
    let f = e.gsgemm;
    call_packed(e, f, ap, (m, n, k), &[gather], (cp, (c_rs, c_cs)), mode);
}

/// Calls a packed-weight GEMM helper `f(ap, m, n, k, b.., c, c_rs, c_cs,
/// mode)` (`b`: B's operands, strided or gathered), failing with error
/// code 1 ([`PACKED_MISMATCH`]) when it returns non-zero.
fn call_packed(
    e: &mut Emit<'_>,
    f: cranelift_codegen::ir::FuncRef,
    ap: Value,
    (m, n, k): (usize, usize, usize),
    b: &[Value],
    (cp, (c_rs, c_cs)): (Value, (i64, i64)),
    mode: Value,
) {
    let mut args = vec![ap, e.ci(m as i64), e.ci(n as i64), e.ci(k as i64)];
    args.extend_from_slice(b);
    args.extend([cp, e.ci(c_rs), e.ci(c_cs), mode]);
    let call = e.b.ins().call(f, &args);
    let rc = e.b.inst_results(call)[0];
    let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
    e.fail_if(bad, 1);
}

/// Im2col for a stride-2 conv ([`phased`]), output rows `[r0, r0 +
/// rows)`: first the chunk's padded input rows are written to scratch
/// (after the columns, in `col`'s workspace) with padding as zeros and
/// each row's even and odd padded columns apart, in two phase rows of
/// `l` floats; then every column row is a plain copy of `OW` consecutive
/// floats of one phase row per output row (no strided gathers, no border
/// cases). Tap (i, j) of output (oh, ow) is padded element (2oh + i,
/// 2ow + j): padded row 2(oh - r0) + i of the scratch, phase `j % 2`,
/// index `ow + j / 2`. ResNet-18's 7x7 stem spent 0.4 ms in the strided
/// im2col at one thread.
#[allow(clippy::too_many_arguments)]
fn im2col_phased(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    xg: Value,
    col: Value,
    cg: usize,
    r0: Value,
    rows: usize,
    gather: bool,
) {
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let (rs, l) = phase_row(geo);
    let crow = chunk_rows(geo);
    // Rows this chunk reads; each channel's block holds a full chunk's.
    let prows = 2 * (rows - 1) + geo.kh;
    let block = phase_rows(geo);
    let taps = geo.kh * geo.kw;
    let nc = col_ld(rows * geo.ow);
    // The scratch lies after the columns of a full chunk (at the start
    // for a gathered B, which has no columns).
    let scratch = if gather {
        0
    } else {
        cg * taps * col_ld(crow * geo.ow)
    };
    let (h, w) = (geo.h as i64, geo.w);
    // Phase φ of a padded row: indices [q_lo, q_hi) hold input columns
    // 2q + φ - pl; the rest of its `l` floats are padding.
    let span = |phi: usize| {
        let q_lo = pl.saturating_sub(phi).div_ceil(2);
        let q_hi = (pl + w).saturating_sub(phi).div_ceil(2).min(l);
        (q_lo.min(q_hi), q_hi)
    };
    e.for_n(cg, |e, ci| {
        let xc = e.b.ins().imul_imm_s(ci, (geo.h * geo.w) as i64);
        let pc = e.b.ins().imul_imm_s(ci, block as i64);
        let ih0 = e.b.ins().imul_imm_s(r0, 2);
        let ih0 = e.b.ins().iadd_imm_s(ih0, -(pt as i64));
        e.for_n(prows, |e, t| {
            let d = e.b.ins().iadd(pc, t);
            let d = e.b.ins().imul_imm_s(d, rs as i64);
            let d = e.b.ins().iadd_imm_s(d, scratch as i64);
            let ih = e.b.ins().iadd(ih0, t);
            let inside = e.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, ih, h);
            let fill = e.b.create_block();
            let pad = e.b.create_block();
            let done = e.b.create_block();
            e.b.ins().brif(inside, fill, &[], pad, &[]);
            e.b.switch_to_block(fill);
            let srow = e.b.ins().imul_imm_s(ih, w as i64);
            let srow = e.b.ins().iadd(srow, xc);
            for phi in 0..2 {
                let (q_lo, q_hi) = span(phi);
                let dp = e.b.ins().iadd_imm_s(d, (phi * l) as i64);
                zero_run(e, col, dp, q_lo);
                let dt = e.b.ins().iadd_imm_s(dp, q_hi as i64);
                zero_run(e, col, dt, l - q_hi);
                if q_hi > q_lo {
                    let iw0 = 2 * q_lo + phi - pl;
                    let s0 = e.b.ins().iadd_imm_s(srow, iw0 as i64);
                    let d0 = e.b.ins().iadd_imm_s(dp, q_lo as i64);
                    copy_run(e, col, d0, xg, s0, q_hi - q_lo, 2, w - iw0);
                }
            }
            e.b.ins().jump(done, &[]);
            e.b.switch_to_block(pad);
            zero_run(e, col, d, rs);
            e.b.ins().jump(done, &[]);
            e.b.switch_to_block(done);
        });
    });
    if gather {
        return;
    }
    e.for_n(cg, |e, ci| {
        let pc = e.b.ins().imul_imm_s(ci, (block * rs) as i64);
        let pc = e.b.ins().iadd_imm_s(pc, scratch as i64);
        let rc = e.b.ins().imul_imm_s(ci, (taps * nc) as i64);
        e.for_n(rows, |e, oh| {
            let srow = e.b.ins().imul_imm_s(oh, (2 * rs) as i64);
            let srow = e.b.ins().iadd(srow, pc);
            let drow = e.b.ins().imul_imm_s(oh, geo.ow as i64);
            let drow = e.b.ins().iadd(drow, rc);
            for i in 0..geo.kh {
                for j in 0..geo.kw {
                    let so = (i * rs + (j % 2) * l + j / 2) as i64;
                    let s0 = e.b.ins().iadd_imm_s(srow, so);
                    let d0 = e.b.ins().iadd_imm_s(drow, ((i * geo.kw + j) * nc) as i64);
                    copy_run(e, col, d0, col, s0, geo.ow, 1, geo.ow);
                }
            }
        });
    });
}

/// Generated im2col for output rows `[r0, r0 + rows)` of one (image,
/// group): `col[(c*kh + i)*kw + j, (oh - r0)*OW + ow] = x[c, oh*sh - pt +
/// i*dh, ow*sw - pl + j*dw]` (0 outside). Each tap's valid column range is
/// computed at compile time, its valid row range is clamped to the chunk
/// at run time.
fn im2col_rows(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    xg: Value,
    col: Value,
    cg: usize,
    r0: Value,
    rows: usize,
) {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let nc = col_ld(rows * geo.ow);
    let taps = geo.kh * geo.kw;
    let r1 = e.b.ins().iadd_imm_s(r0, rows as i64);
    // Element of col at (row 0, output row r0) is 0: shift by -r0*OW.
    let shift = e.b.ins().imul_imm_s(r0, -(geo.ow as i64));
    e.for_n(cg, |e, ci| {
        let xc = e.b.ins().imul_imm_s(ci, (geo.h * geo.w) as i64);
        for i in 0..geo.kh {
            let (olo, ohi) = valid_range(geo.oh, geo.h, sh, pt, i, dh);
            let lo = e.ci(olo as i64);
            let lo = e.b.ins().smax(lo, r0);
            let lo = e.b.ins().smin(lo, r1);
            let hi = e.ci(ohi as i64);
            let hi = e.b.ins().smin(hi, r1);
            let hi = e.b.ins().smax(hi, lo);
            for j in 0..geo.kw {
                let (wlo, whi) = valid_range(geo.ow, geo.w, sw, pl, j, dw);
                // Row of col, shifted so output row oh starts at oh*OW.
                let r = e.b.ins().imul_imm_s(ci, taps as i64);
                let r = e.b.ins().iadd_imm_s(r, (i * geo.kw + j) as i64);
                let row0 = e.b.ins().imul_imm_s(r, nc as i64);
                let row0 = e.b.ins().iadd(row0, shift);
                let zero_rows = |e: &mut Emit<'_>, a: Value, b: Value| {
                    e.for_range(a, b, 1, |e, oh| {
                        let d = e.b.ins().imul_imm_s(oh, geo.ow as i64);
                        let d = e.b.ins().iadd(row0, d);
                        zero_run(e, col, d, geo.ow);
                    });
                };
                // Output rows outside [lo, hi) are all padding.
                zero_rows(e, r0, lo);
                zero_rows(e, hi, r1);
                e.for_range(lo, hi, 1, |e, oh| {
                    // ih = oh*sh - pt + i*dh
                    let ih = e.b.ins().imul_imm_s(oh, sh as i64);
                    let ih = e.b.ins().iadd_imm_s(ih, i as i64 * dh as i64 - pt as i64);
                    let d = e.b.ins().imul_imm_s(oh, geo.ow as i64);
                    let d = e.b.ins().iadd(row0, d);
                    zero_run(e, col, d, wlo);
                    let dt = e.b.ins().iadd_imm_s(d, whi as i64);
                    zero_run(e, col, dt, geo.ow - whi);
                    if whi > wlo {
                        let srow = e.b.ins().imul_imm_s(ih, geo.w as i64);
                        let srow = e.b.ins().iadd(srow, xc);
                        let iw0 = (wlo * sw + j * dw) as i64 - pl as i64;
                        let s0 = e.b.ins().iadd_imm_s(srow, iw0);
                        let d0 = e.b.ins().iadd_imm_s(d, wlo as i64);
                        let avail = (geo.w as i64 - iw0) as usize;
                        copy_run(e, col, d0, xg, s0, whi - wlo, sw, avail);
                    }
                });
            }
        }
    });
}

/// Direct convolution (and depthwise, its one-channel-per-group case): per
/// (image, output channel), zero the output plane, then for every input
/// channel of its group and every tap add `w * x` over the tap's valid
/// rectangle (computed at compile time; f32x4 along rows when the stride
/// is 1), then the channel's epilogue while the plane is in cache.
fn conv_direct(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    spec: Option<&elementwise::EwSpec<'_>>,
) -> Result<(), String> {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let (cg, mg) = geo.per_group();
    let p = geo.oh * geo.ow;
    let taps = geo.kh * geo.kw;
    if cg == 1 && mg == 1 {
        let win = super::direct::Window {
            h: geo.h,
            w: geo.w,
            oh: geo.oh,
            ow: geo.ow,
            kh: geo.kh,
            kw: geo.kw,
            sh,
            sw,
            dh,
            dw,
            pt,
            pl,
        };
        let plane =
            super::direct::PadPlane::new_direct(win).or_else(|| super::direct::PadPlane::new(win));
        if let Some(plane) = plane {
            return super::direct::depthwise(e, geo, plane, x, w, y, spec);
        }
    }
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.m, |e, co| {
            let t = e.b.ins().imul_imm_s(n, geo.m as i64);
            let plane = e.b.ins().iadd(t, co);
            let yo = e.b.ins().imul_imm_s(plane, p as i64);
            if cg == 1 && mg == 1 {
                // Depthwise: output-stationary, every element written once.
                let xo = e.b.ins().imul_imm_s(plane, (geo.h * geo.w) as i64);
                let wo = e.b.ins().imul_imm_s(co, taps as i64);
                depthwise_plane(e, geo, x, w, y, (xo, wo, yo));
                if let Err(m) = tile_epilogue(e, spec, n, co, 1) {
                    err.get_or_insert(m);
                }
                return;
            }
            zero_run(e, y, yo, p);
            // First input channel of co's group: n*C + (co / mg) * cg.
            let gi = e.b.ins().udiv_imm_u(co, mg as i64);
            let c0 = e.b.ins().imul_imm_s(gi, cg as i64);
            let t = e.b.ins().imul_imm_s(n, geo.c as i64);
            let c0 = e.b.ins().iadd(t, c0);
            let wco = e.b.ins().imul_imm_s(co, (cg * taps) as i64);
            let body = |e: &mut Emit<'_>, ci: Value| {
                let xc = e.b.ins().iadd(c0, ci);
                let xo = e.b.ins().imul_imm_s(xc, (geo.h * geo.w) as i64);
                let wo = e.b.ins().imul_imm_s(ci, taps as i64);
                let wo = e.b.ins().iadd(wo, wco);
                direct_taps(e, geo, x, w, y, (xo, wo, yo), (sh, sw, dh, dw, pt, pl));
            };
            if cg == 1 {
                let z = e.ci(0);
                body(e, z);
            } else {
                e.for_n(cg, body);
            }
            if let Err(m) = tile_epilogue(e, spec, n, co, 1) {
                err.get_or_insert(m);
            }
        });
    });
    err.map_or(Ok(()), Err)
}

/// One depthwise plane (`C == M`, one channel per group, so plane `n*M + co`
/// of `x` feeds plane `n*M + co` of `y`), output-stationary: the taps are
/// loaded once into registers, the interior (every tap valid) computes four
/// adjacent output columns per f32x4 ([`Emit::load_strided4`]), and the
/// border computes each output's valid taps at run time. Each output is
/// `0 + w0*x0 + w1*x1 + ...` over its valid taps in (row, column) order
/// with separate multiply and add, as the tap-major direct loop computes it,
/// so results are bitwise the same; it avoids that loop's read-modify-write
/// of the output plane per tap, which bound MobileNet's depthwise convs.
fn depthwise_plane(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    (xo, wo, yo): (Value, Value, Value),
) {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let (kh, kw) = (geo.kh, geo.kw);
    let inter = |out: usize, size: usize, s: usize, pad: usize, d: usize, k: usize| {
        (0..k).fold((0usize, out), |(lo, hi), t| {
            let (a, b) = valid_range(out, size, s, pad, t, d);
            (lo.max(a), hi.min(b))
        })
    };
    let (rlo, rhi) = inter(geo.oh, geo.h, sh, pt, dh, kh);
    let (qlo, qhi) = inter(geo.ow, geo.w, sw, pl, dw, kw);
    let (rlo, rhi, qlo, qhi) = if rhi > rlo && qhi > qlo && kh * kw <= 49 {
        (rlo, rhi, qlo, qhi)
    } else {
        (geo.oh, geo.oh, geo.ow, geo.ow)
    };
    let qv = super::reduce::vec4_end(qlo, qhi, sw, pl, (kw - 1) * dw, geo.w);
    // Scalar outputs of row `r`, columns `[q0, q1)`, run-time tap ranges.
    let generic = |e: &mut Emit<'_>, r: Value, q0: usize, q1: usize| {
        if q1 <= q0 {
            return;
        }
        let (ilo, ihi, _) = super::reduce::tap_range(e, r, sh, pt, dh, kh, geo.h, 0);
        let a = e.ci(q0 as i64);
        let b = e.ci(q1 as i64);
        e.for_range(a, b, 1, |e, q| {
            let (jlo, jhi, _) = super::reduce::tap_range(e, q, sw, pl, dw, kw, geo.w, 0);
            let z = e.cf(0.0);
            let acc = e.var(F32, z);
            let hs = e.b.ins().imul_imm_s(r, sh as i64);
            let hs = e.b.ins().iadd_imm_s(hs, -(pt as i64));
            let ws = e.b.ins().imul_imm_s(q, sw as i64);
            let ws = e.b.ins().iadd_imm_s(ws, -(pl as i64));
            e.for_range(ilo, ihi, 1, |e, i| {
                let ih = e.b.ins().imul_imm_s(i, dh as i64);
                let ih = e.b.ins().iadd(ih, hs);
                let row = e.b.ins().imul_imm_s(ih, geo.w as i64);
                let row = e.b.ins().iadd(row, xo);
                let wr = e.b.ins().imul_imm_s(i, kw as i64);
                let wr = e.b.ins().iadd(wr, wo);
                e.for_range(jlo, jhi, 1, |e, j| {
                    let iw = e.b.ins().imul_imm_s(j, dw as i64);
                    let iw = e.b.ins().iadd(iw, ws);
                    let idx = e.b.ins().iadd(row, iw);
                    let xv = e.load_f32(x, idx);
                    let wi = e.b.ins().iadd(wr, j);
                    let wv = e.load_f32(w, wi);
                    let pr = e.b.ins().fmul(xv, wv);
                    let a = e.b.use_var(acc);
                    let nv = e.b.ins().fadd(a, pr);
                    e.b.def_var(acc, nv);
                });
            });
            let a = e.b.use_var(acc);
            let oi = e.b.ins().imul_imm_s(r, geo.ow as i64);
            let oi = e.b.ins().iadd(oi, yo);
            let oi = e.b.ins().iadd(oi, q);
            e.store_f32(a, y, oi);
        });
    };
    let rows = |e: &mut Emit<'_>, a: usize, b: usize| {
        if b > a {
            let s = e.ci(a as i64);
            let en = e.ci(b as i64);
            e.for_range(s, en, 1, |e, r| generic(e, r, 0, geo.ow));
        }
    };
    rows(e, 0, rlo.min(geo.oh));
    if rhi > rlo {
        // The filter's taps, splatted once per plane.
        let wv: Vec<Value> = (0..kh * kw)
            .map(|t| {
                let wi = e.b.ins().iadd_imm_s(wo, t as i64);
                let s = e.load_f32(w, wi);
                e.splat(s)
            })
            .collect();
        let s = e.ci(rlo as i64);
        let en = e.ci(rhi as i64);
        e.for_range(s, en, 1, |e, r| {
            generic(e, r, 0, qlo);
            if qv > qlo {
                let hs = e.b.ins().imul_imm_s(r, sh as i64);
                let hs = e.b.ins().iadd_imm_s(hs, -(pt as i64));
                let row0 = e.b.ins().imul_imm_s(hs, geo.w as i64);
                let row0 = e.b.ins().iadd(row0, xo);
                let orow = e.b.ins().imul_imm_s(r, geo.ow as i64);
                let orow = e.b.ins().iadd(orow, yo);
                let a = e.ci(qlo as i64);
                let b = e.ci(qv as i64);
                e.for_range(a, b, 4, |e, q| {
                    let ws = e.b.ins().imul_imm_s(q, sw as i64);
                    let ws = e.b.ins().iadd_imm_s(ws, -(pl as i64));
                    let base = e.b.ins().iadd(row0, ws);
                    let bp = e.addr(x, base, 4);
                    let mut acc = e.vf(0.0);
                    for i in 0..kh {
                        for j in 0..kw {
                            let off = i * dh * geo.w + j * dw;
                            let xv = e.load_strided4(bp, off, sw);
                            let pr = e.b.ins().fmul(xv, wv[i * kw + j]);
                            acc = e.b.ins().fadd(acc, pr);
                        }
                    }
                    let oi = e.b.ins().iadd(orow, q);
                    e.store_v(acc, y, oi);
                });
            }
            generic(e, r, qv, geo.ow);
        });
    }
    rows(e, rhi.max(rlo), geo.oh);
}

/// Adds every tap of one (output channel, input channel) pair: plane
/// offsets `(xo, wo, yo)` in elements.
fn direct_taps(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    (xo, wo, yo): (Value, Value, Value),
    (sh, sw, dh, dw, pt, pl): (usize, usize, usize, usize, usize, usize),
) {
    for i in 0..geo.kh {
        let (olo, ohi) = valid_range(geo.oh, geo.h, sh, pt, i, dh);
        for j in 0..geo.kw {
            let (wlo, whi) = valid_range(geo.ow, geo.w, sw, pl, j, dw);
            if ohi <= olo || whi <= wlo {
                continue;
            }
            let wi = e.b.ins().iadd_imm_s(wo, (i * geo.kw + j) as i64);
            let ws = e.load_f32(w, wi);
            let wv = e.splat(ws);
            let len = whi - wlo;
            let s = e.ci(olo as i64);
            let en = e.ci(ohi as i64);
            e.for_range(s, en, 1, |e, oh| {
                let ih = e.b.ins().imul_imm_s(oh, sh as i64);
                let ih = e.b.ins().iadd_imm_s(ih, i as i64 * dh as i64 - pt as i64);
                let srow = e.b.ins().imul_imm_s(ih, geo.w as i64);
                let srow = e.b.ins().iadd(srow, xo);
                let s0 =
                    e.b.ins()
                        .iadd_imm_s(srow, (wlo * sw + j * dw) as i64 - pl as i64);
                let d = e.b.ins().imul_imm_s(oh, geo.ow as i64);
                let d = e.b.ins().iadd(d, yo);
                let d0 = e.b.ins().iadd_imm_s(d, wlo as i64);
                let v_end = if sw == 1 { len / 4 * 4 } else { 0 };
                if v_end > 0 {
                    let a = e.ci(0);
                    let b = e.ci(v_end as i64);
                    e.for_range(a, b, 4, |e, jj| {
                        let si = e.b.ins().iadd(s0, jj);
                        let xv = e.load_v(x, si);
                        let di = e.b.ins().iadd(d0, jj);
                        let yv = e.load_v(y, di);
                        let pr = e.b.ins().fmul(xv, wv);
                        let r = e.b.ins().fadd(yv, pr);
                        e.store_v(r, y, di);
                    });
                }
                if v_end < len {
                    let a = e.ci(v_end as i64);
                    let b = e.ci(len as i64);
                    e.for_range(a, b, 1, |e, jj| {
                        let t = e.b.ins().imul_imm_s(jj, sw as i64);
                        let si = e.b.ins().iadd(s0, t);
                        let xs = e.load_f32(x, si);
                        let di = e.b.ins().iadd(d0, jj);
                        let ys = e.load_f32(y, di);
                        let pr = e.b.ins().fmul(xs, ws);
                        let r = e.b.ins().fadd(ys, pr);
                        e.store_f32(r, y, di);
                    });
                }
            });
        }
    }
}

/// The algorithm a conv kernel is lowered with (`None` for other kernels),
/// for profiles.
pub(crate) fn algo_of(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Option<ConvAlgo> {
    if k.kind != super::group::KernelKind::Contraction
        || !matches!(g.node(k.nodes[0]).op, Op::Conv2d(_))
    {
        return None;
    }
    ConvGeom::of_node(g, k.nodes[0])
        .ok()
        .map(|geom| choose_algo(&geom, g, k, opts))
}
