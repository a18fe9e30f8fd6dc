//! `block-channels`: chains of pointwise, depthwise and 3x3 Winograd
//! convolutions (and the elementwise ops between them) are stored
//! channel-blocked, `[N, C/8, H, W, 8]` ([`DataLayout::Nchw8c`]), the CPU
//! layout in which a pointwise conv's GEMM reads each pixel's channels as
//! one contiguous run and a depthwise conv's vectors are channels (a
//! Winograd conv spreads a block over eight planes for its transforms).
//! MobileNet-style inverted residual blocks are such chains from end to
//! end; ResNet-style bottlenecks are too, between their strided convs.
//!
//! An elementwise op with one blocked operand of its result's shape runs
//! blocked; its other full operands (a residual from outside the region)
//! are reordered in, and counted as reorders. By default
//! ([`BlockOptions`]) max and average pools, channel Concats and channel
//! Splits in whole blocks join too, so GoogLeNet- and SqueezeNet-style
//! models (and the optimiser's merged branch convs) run blocked from
//! their stem pool to their global pool.
//!
//! A region is a set of blocked values connected through the ops that
//! produce them. It is blocked only if it holds at least [`MIN_CONVS`]
//! pointwise or depthwise convs (the ones the layout speeds up) and its
//! reorders (a Reshape + Transpose into the layout where the
//! region reads a plain tensor, and back where a plain op reads a blocked
//! one) move at most a [`MAX_REORDER_SHARE`] share of the elements its
//! convs write: a lone conv would pay two reorders for one faster GEMM.
//! Values keep their names; a value that plain ops still read keeps its
//! name on the reordered copy, the blocked one is `NAME.nchw8c`.
//!
//! A conv of fewer than 8 input channels (a stem; see [`unfit_into`])
//! joins a region as its entry: it reads its plain input and writes its
//! result blocked (`data=nchw_to_nchw8c`), so the region needs no reorder
//! of that result.

use crate::conv_algo::ConvGeom;
use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::op::{Conv2d, ConvAlgo, DataLayout, ReduceKind, Unary, WeightLayout};
use dnnc_ir::{DType, Graph, GraphError, NodeId, Op, TensorType, ValueId};
use std::collections::{HashMap, HashSet};

/// Fewest pointwise or depthwise convs a blocked region holds.
pub const MIN_CONVS: usize = 3;

/// Largest share of a region's conv output elements its reorders may move.
pub const MAX_REORDER_SHARE: f64 = 0.25;

/// The `block-channels` pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockChannels;

impl Pass for BlockChannels {
    fn name(&self) -> &'static str {
        "block-channels"
    }
    fn description(&self) -> &'static str {
        "store chains of pointwise and depthwise convs channel-blocked (data=nchw8c) for the CPU backend"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        block_channels(g).map_err(|e| PassError::graph("block-channels", e))
    }
}

/// The kinds of conv the channel-blocked layout has kernels for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedKernel {
    /// 1x1, stride 1, unpadded, undilated, one group: a GEMM.
    Pointwise,
    /// Undilated, one input and one output channel per group.
    Depthwise,
    /// 3x3, stride 1, undilated, one group, any padding, where
    /// `select-conv-algo` (or the optimiser) chose Winograd, F(2x2) or
    /// F(4x4): its transforms read and write the blocks' planes.
    Winograd,
    /// Any other undilated conv of one group (5x5, 1x7 and 7x1, strided
    /// 3x3 and 1x1, a 3x3 not run as Winograd), or of groups of eight
    /// input and eight output channels (RegNet's 3x3 convs, each group
    /// one block): an implicit GEMM whose tiles read each pixel's window
    /// straight from the blocks, taps in the filter's order
    /// (`dnnc_runtime::cpu::blocked::dnnc_conv_into_nchw8c` with a blocked
    /// input).
    Window,
}

/// Which blocked kernel conv `geom` runs as, if any: its geometry, and
/// for a 3x3 stride-1 conv the algorithm chosen ([`winograd_algo`]).
pub fn blocked_kernel(geom: &ConvGeom) -> Option<BlockedKernel> {
    let p = &geom.p;
    let undilated = p.dilations == [1, 1];
    let pointwise = geom.g == 1
        && geom.kh == 1
        && geom.kw == 1
        && p.strides == [1, 1]
        && p.pads == [0; 4]
        && undilated;
    let depthwise = geom.g == geom.c && geom.m == geom.c && undilated;
    let b = DataLayout::BLOCK;
    let grouped8 = geom.g > 1 && geom.c == geom.g * b && geom.m == geom.g * b;
    let winograd = geom.g == 1 && geom.kh == 3 && geom.kw == 3 && p.strides == [1, 1] && undilated;
    if pointwise {
        Some(BlockedKernel::Pointwise)
    } else if depthwise {
        Some(BlockedKernel::Depthwise)
    } else if winograd && winograd_algo(geom).is_some() {
        Some(BlockedKernel::Winograd)
    } else if (geom.g == 1 || grouped8) && undilated {
        Some(BlockedKernel::Window)
    } else {
        None
    }
}

/// Most window rows of a blocked depthwise conv: the row kernel's own
/// bound (`dnnc_runtime::cpu::dwrow::DW_ROW_MAX_KH`; a test checks the
/// two agree).
pub const DW_MAX_ROWS: usize = 32;

/// Why conv `geom` has no blocked kernel, or `None` when it has one
/// ([`blocked_kernel`]: any undilated conv of one group, or an undilated
/// depthwise conv of at most [`DW_MAX_ROWS`] window rows), channels in
/// whole blocks, its filter known at compile time (the kernels take it
/// packed). The one definition both this pass and the CPU backend's
/// lowering of a `data=nchw8c` conv check.
pub fn unfit(geom: &ConvGeom) -> Option<String> {
    let b = DataLayout::BLOCK;
    if !geom.c.is_multiple_of(b) || !geom.m.is_multiple_of(b) {
        return Some(format!("data=nchw8c needs channels in blocks of {b}"));
    }
    if !geom.const_w {
        return Some("data=nchw8c needs a filter known at compile time".into());
    }
    match blocked_kernel(geom) {
        None => Some(
            "data=nchw8c runs undilated convs of one group or of groups of 8 channels in and out, and undilated depthwise convs only"
                .to_string(),
        ),
        Some(BlockedKernel::Depthwise) if geom.kh > DW_MAX_ROWS => Some(format!(
            "data=nchw8c runs depthwise windows of at most {DW_MAX_ROWS} rows"
        )),
        // The window kernel is an implicit GEMM: a conv that asks for
        // another algorithm is refused, never run as something else.
        Some(BlockedKernel::Window)
            if !matches!(
                geom.p.algo,
                ConvAlgo::Auto | ConvAlgo::Direct | ConvAlgo::Im2col
            ) =>
        {
            Some(format!(
                "data=nchw8c runs this conv as an implicit GEMM only (algo=auto, direct or im2col), not algo={}",
                geom.p.algo.name()
            ))
        }
        Some(_) => None,
    }
}

/// Whether conv node `n` gets a blocked kernel: an NCHW f32 conv that is
/// not [`unfit`], left to the backend's algorithm choice or set to that
/// kernel's. Its `layout=` (how an NCHW GEMM packs the filter) does not
/// matter: the blocked kernels pack their own, and the rewrite drops it.
/// (The e-graph pins `layout=lanes` on MobileNet-V2's 7x7 pointwise
/// convs, cheaper than panels in NCHW; refusing them ended the
/// `--optimize` build's blocked region there, 3% slower than the
/// default build.)
pub fn blockable_conv(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv2d(p) = &node.op else {
        return false;
    };
    if p.data != DataLayout::Nchw || g.value(node.inputs[0]).ty.dtype != DType::F32 {
        return false;
    }
    let Ok(geom) = ConvGeom::of_node(g, n) else {
        return false;
    };
    if unfit(&geom).is_some() {
        return false;
    }
    match blocked_kernel(&geom) {
        Some(BlockedKernel::Pointwise) => matches!(p.algo, ConvAlgo::Auto | ConvAlgo::Pointwise),
        Some(BlockedKernel::Depthwise) => matches!(p.algo, ConvAlgo::Auto | ConvAlgo::Depthwise),
        Some(BlockedKernel::Winograd) => true,
        // The implicit GEMM, where the algorithm chosen is one (an FFT
        // conv keeps its algorithm, and ends the region).
        Some(BlockedKernel::Window) => {
            let algo = match p.algo {
                ConvAlgo::Auto => geom.default_algo(),
                a => a,
            };
            matches!(algo, ConvAlgo::Im2col | ConvAlgo::Direct)
        }
        None => false,
    }
}

/// The Winograd algorithm a 3x3 conv runs blocked: its `algo` when that
/// is Winograd, the heuristic's choice ([`ConvGeom::default_algo`]) when
/// it is `auto` and that is Winograd; `None` otherwise (it then runs as
/// the blocked window kernel, [`BlockedKernel::Window`]).
pub fn winograd_algo(geom: &ConvGeom) -> Option<ConvAlgo> {
    let algo = match geom.p.algo {
        ConvAlgo::Auto => geom.default_algo(),
        a => a,
    };
    matches!(algo, ConvAlgo::Winograd2 | ConvAlgo::Winograd4).then_some(algo)
}

/// Why conv `geom` cannot read a plain input and write its result blocked
/// (`data=nchw_to_nchw8c`), or `None` when it can: an ungrouped,
/// undilated conv of fewer than 8 input channels (a stem, whose input no
/// blocked kernel reads), whole blocks of output channels, its filter
/// known at compile time. The one
/// definition both this pass and the CPU backend's lowering check.
pub fn unfit_into(geom: &ConvGeom) -> Option<String> {
    let b = DataLayout::BLOCK;
    let why = if geom.g != 1 {
        "runs ungrouped convs only"
    } else if geom.p.dilations != [1, 1] {
        "runs undilated convs only"
    } else if geom.c >= b {
        "is for inputs of fewer than 8 channels"
    } else if !geom.m.is_multiple_of(b) {
        "needs output channels in blocks of 8"
    } else if !geom.const_w {
        "needs a filter known at compile time"
    } else {
        return None;
    };
    Some(format!("data=nchw_to_nchw8c {why}"))
}

/// Whether conv node `n` may write its result blocked from a plain input
/// (see [`unfit_into`]): an NCHW f32 conv left to the backend's algorithm
/// choice or set to a GEMM-like one (`direct`, `im2col`); its `layout=`
/// does not matter, as for [`blockable_conv`].
fn into_blockable_conv(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv2d(p) = &node.op else {
        return false;
    };
    if p.data != DataLayout::Nchw
        || !matches!(p.algo, ConvAlgo::Auto | ConvAlgo::Direct | ConvAlgo::Im2col)
        || g.value(node.inputs[0]).ty.dtype != DType::F32
    {
        return false;
    }
    // A stem whose result only a max pool reads (GoogLeNet's, ResNet's)
    // stays plain: the CPU backend pools it band by band inside its
    // im2col kernel, never writing the full-size map (GoogLeNet: 1.70 ms
    // against 1.62 + 0.33 blocked); the region starts after the pool.
    // Through a Relu or Clip (fused into the conv's kernel) to the pool.
    let mut out = node.outputs[0];
    loop {
        let users = g.users(out);
        match users.as_slice() {
            [(u, _)] if matches!(g.node(*u).op, Op::MaxPool(_)) => return false,
            [(u, _)] if matches!(g.node(*u).op, Op::Unary(Unary::Relu | Unary::Clip { .. })) => {
                out = g.node(*u).outputs[0];
            }
            _ => break,
        }
    }
    ConvGeom::of_node(g, n).is_ok_and(|geom| unfit_into(&geom).is_none())
}

/// Whether conv `n` (of a region, `entries` its stems) gains from the
/// blocked layout, so that it counts towards [`MIN_CONVS`]: a pointwise
/// or depthwise conv. Winograd and dense window convs run about as fast
/// blocked as plain, or a little slower (their transforms and row copies;
/// the plain im2col GEMM splits better over two threads), so a region of
/// those alone would pay its reorders for nothing: ResNet-18, whose only
/// 1x1 convs are strided, ran 1.03 (one thread) and 1.07-1.08 (two)
/// blocked from its stem pool on (alternating `dnnc bench` pairs).
fn gains(g: &Graph, n: NodeId, entries: &HashSet<NodeId>) -> bool {
    !entries.contains(&n)
        && ConvGeom::of_node(g, n).is_ok_and(|geom| {
            matches!(
                blocked_kernel(&geom),
                Some(BlockedKernel::Pointwise | BlockedKernel::Depthwise)
            )
        })
}

/// Whether `v` is a one-element operand, the same in either layout.
fn scalar(g: &Graph, v: ValueId) -> bool {
    g.value(v).ty.shape.iter().product::<usize>() == 1
}

/// Whether `v` is a per-channel operand of a binary op with result type
/// `out`: `[N or 1, C, 1, 1]` (a squeeze-excitation scale, a channel
/// constant) or `[C, 1, 1]` (a bias the optimiser moved past a pool,
/// Inception's pool branches). Reordered into the blocked layout (`[.,
/// C/8, 1, 1, 8]`, C elements an image) it broadcasts over the blocked
/// result as it did over the plain one.
fn per_channel(g: &Graph, v: ValueId, out: &TensorType) -> bool {
    let ty = &g.value(v).ty;
    let batch_ok = |d: usize| d == out.shape[0] || d == 1;
    ty.dtype == out.dtype
        && match *ty.shape.as_slice() {
            [n, c, 1, 1] => batch_ok(n) && c == out.shape[1],
            [c, 1, 1] => c == out.shape[1],
            _ => false,
        }
}

/// Whether elementwise node `n` computes the same in the blocked layout:
/// a unary op, or a binary one whose operands are scalars, per-channel
/// ([`per_channel`]) or of its result's shape, on a rank-4 f32 result.
fn layout_free(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    if !matches!(node.op, Op::Unary(_) | Op::Binary(_)) || node.outputs.len() != 1 {
        return false;
    }
    let out = &g.value(node.outputs[0]).ty;
    out.dtype == DType::F32
        && out.rank() == 4
        && out.shape[1].is_multiple_of(DataLayout::BLOCK)
        && node.inputs.iter().all(|&v| {
            scalar(g, v)
                || g.value(v).ty == *out
                || (matches!(node.op, Op::Binary(_)) && per_channel(g, v, out))
        })
}

/// The operands of layout-free node `n` that must be blocked for it to
/// run blocked: those of its result's shape (scalars and per-channel
/// operands are reordered or read as they are).
fn full_operands(g: &Graph, n: NodeId) -> Vec<ValueId> {
    let node = g.node(n);
    let out = &g.value(node.outputs[0]).ty;
    node.inputs
        .iter()
        .copied()
        .filter(|&v| g.value(v).ty == *out && !scalar(g, v))
        .collect()
}

/// Whether node `n` is a max or average pool, or a channel Concat or
/// Split, of rank-4 f32 data in whole channel blocks: ops with a blocked
/// form (`data=nchw8c` pools, Concat and Split along the block axis) that
/// join a region when it computes their (first) data operand. (A Split
/// along channels is how the optimiser's merged branch convs hand each
/// branch its part.)
fn blocked_form(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let whole = |v: ValueId| {
        let t = &g.value(v).ty;
        t.dtype == DType::F32 && t.rank() == 4 && t.shape[1].is_multiple_of(DataLayout::BLOCK)
    };
    let fits = node.outputs.len() == 1 && whole(node.outputs[0]);
    match &node.op {
        Op::Split { axis, .. } => {
            dnnc_ir::infer::norm_axis(*axis, 4) == Ok(1)
                && whole(node.inputs[0])
                && node.outputs.iter().all(|&v| whole(v))
        }
        Op::MaxPool(p) | Op::AveragePool(p) => {
            fits && p.data == DataLayout::Nchw && whole(node.inputs[0])
        }
        Op::Concat { axis } => {
            fits && dnnc_ir::infer::norm_axis(*axis, 4) == Ok(1)
                && node.inputs.iter().all(|&v| whole(v))
        }
        _ => false,
    }
}

/// The operands of node `n` that a blocked region must hand it blocked
/// (reordering them in where they are plain): a pool's input, every
/// Concat input, an elementwise op's [`full_operands`].
fn region_operands(g: &Graph, n: NodeId) -> Vec<ValueId> {
    let node = g.node(n);
    match &node.op {
        Op::MaxPool(_) | Op::AveragePool(_) | Op::Split { .. } => vec![node.inputs[0]],
        Op::Concat { .. } => node.inputs.clone(),
        _ => full_operands(g, n),
    }
}

fn find(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// What the pass may take into a region beyond convs and elementwise ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockOptions {
    /// Max and average pools (`data=nchw8c`), channel Concats and channel
    /// Splits, so GoogLeNet- and SqueezeNet-style models run blocked from
    /// their stem pool to their global pool. On by default: on the Xeon GoogLeNet
    /// ran 0.987 and 0.941 of the time with them plain (1 and 2 threads),
    /// SqueezeNet 0.963 and 0.977 (its pointwise convs ~10% faster, the
    /// blocked pools as fast as the plain ones or faster, the Winograd
    /// transforms ~5% slower; docs/cpu-backend.md, "Channel-blocked
    /// chains").
    pub pools_and_concats: bool,
}

impl Default for BlockOptions {
    fn default() -> Self {
        BlockOptions {
            pools_and_concats: true,
        }
    }
}

/// Rewrites `g` in place (see the module docs) with the default
/// [`BlockOptions`].
pub fn block_channels(g: &mut Graph) -> Result<PassStats, GraphError> {
    block_channels_with(g, BlockOptions::default())
}

/// Rewrites `g` in place, taking what `opts` allows into regions.
pub fn block_channels_with(g: &mut Graph, opts: BlockOptions) -> Result<PassStats, GraphError> {
    let order = g.topo_order();
    let nv = g.value_count();
    // Values a blocked op would produce, and their regions.
    let mut blocked = vec![false; nv];
    let mut parent: Vec<usize> = (0..nv).collect();
    let mut convs: Vec<NodeId> = Vec::new();
    // Convs that read a plain input and write blocked (region entries).
    let mut entries: HashSet<NodeId> = HashSet::new();
    for &n in &order {
        let node = g.node(n);
        let Some(&out) = node.outputs.first() else {
            continue;
        };
        if into_blockable_conv(g, n) {
            blocked[out.index()] = true;
            convs.push(n);
            entries.insert(n);
        } else if blockable_conv(g, n) {
            blocked[out.index()] = true;
            convs.push(n);
            let x = node.inputs[0];
            if blocked[x.index()] {
                let (a, b) = (find(&mut parent, x.index()), find(&mut parent, out.index()));
                parent[a] = b;
            }
        } else if opts.pools_and_concats && blocked_form(g, n) {
            // A pool joins when its input is blocked; a Concat when any
            // input is (the others are reordered in).
            let ins = region_operands(g, n);
            let joins = match node.op {
                Op::Concat { .. } => ins.iter().any(|v| blocked[v.index()]),
                _ => blocked[ins[0].index()],
            };
            if joins {
                for &o in &node.outputs {
                    blocked[o.index()] = true;
                    let (a, b) = (find(&mut parent, o.index()), find(&mut parent, out.index()));
                    parent[a] = b;
                }
                for v in ins.iter().filter(|v| blocked[v.index()]) {
                    let (a, b) = (find(&mut parent, v.index()), find(&mut parent, out.index()));
                    parent[a] = b;
                }
            }
        } else if layout_free(g, n) {
            // Any blocked full operand takes the op into the layout; a
            // plain one (a residual from outside the region) is
            // reordered in, and counted so below.
            let ins = full_operands(g, n);
            if ins.iter().any(|v| blocked[v.index()]) {
                blocked[out.index()] = true;
                // A blocked per-channel operand (a squeeze-excitation
                // branch of blocked convs) joins the region too.
                let joined = node.inputs.iter().filter(|v| blocked[v.index()]);
                for v in joined {
                    let (a, b) = (find(&mut parent, v.index()), find(&mut parent, out.index()));
                    parent[a] = b;
                }
            }
        }
    }
    // Per region: convs, elements the convs write, elements reordered.
    let numel = |g: &Graph, v: ValueId| g.value(v).ty.shape.iter().product::<usize>();
    let mut conv_count: HashMap<usize, usize> = HashMap::new();
    let mut conv_elems: HashMap<usize, usize> = HashMap::new();
    let mut reorder_elems: HashMap<usize, usize> = HashMap::new();
    let mut entered: HashSet<ValueId> = HashSet::new();
    for &n in &convs {
        let node = g.node(n);
        let (x, out) = (node.inputs[0], node.outputs[0]);
        let r = find(&mut parent, out.index());
        *conv_count.entry(r).or_default() += usize::from(gains(g, n, &entries));
        *conv_elems.entry(r).or_default() += numel(g, out);
        if !entries.contains(&n) && !blocked[x.index()] && entered.insert(x) {
            *reorder_elems.entry(r).or_default() += numel(g, x);
        }
    }
    for &n in &order {
        let node = g.node(n);
        let Some(&out) = node.outputs.first() else {
            continue;
        };
        if !blocked[out.index()] || matches!(node.op, Op::Conv2d(_)) {
            continue;
        }
        for v in region_operands(g, n) {
            if !blocked[v.index()] && entered.insert(v) {
                let r = find(&mut parent, out.index());
                *reorder_elems.entry(r).or_default() += numel(g, v);
            }
        }
    }
    for v in (0..nv).filter(|&i| blocked[i]) {
        let vid = ValueId(v as u32);
        // A global pool reads the blocked value itself and reorders only
        // its means (see the rewrite below).
        let mut pooled = 0;
        let mut plain_use = g.outputs().contains(&vid);
        for (u, _) in g.users(vid) {
            let un = g.node(u);
            if un.outputs.first().is_some_and(|o| blocked[o.index()]) {
                continue;
            }
            if matches!(un.op, Op::GlobalAveragePool) {
                pooled += numel(g, un.outputs[0]);
            } else {
                plain_use = true;
            }
        }
        let moved = if plain_use { numel(g, vid) } else { 0 } + pooled;
        if moved > 0 {
            let r = find(&mut parent, v);
            *reorder_elems.entry(r).or_default() += moved;
        }
    }
    let keep: HashSet<usize> = conv_count
        .iter()
        .filter(|&(r, &c)| {
            let moved = reorder_elems.get(r).copied().unwrap_or(0) as f64;
            let written = conv_elems.get(r).copied().unwrap_or(0) as f64;
            c >= MIN_CONVS && moved <= MAX_REORDER_SHARE * written
        })
        .map(|(&r, _)| r)
        .collect();
    for (v, b) in blocked.iter_mut().enumerate() {
        if *b && !keep.contains(&find(&mut parent, v)) {
            *b = false;
        }
    }
    let mut stats = PassStats::default();
    if !blocked.iter().any(|&b| b) {
        return Ok(stats);
    }

    // Blocked twins of the region's values, built in topological order.
    let mut twin: HashMap<ValueId, ValueId> = HashMap::new();
    let mut twins: Vec<(ValueId, ValueId)> = Vec::new();
    let mut into_blocks: HashMap<ValueId, ValueId> = HashMap::new();
    let mut renames: Vec<(ValueId, String)> = Vec::new();
    let mut old_nodes: Vec<NodeId> = Vec::new();
    for &n in &order {
        let node = g.node(n).clone();
        let Some(&out) = node.outputs.first() else {
            continue;
        };
        if !blocked[out.index()] {
            continue;
        }
        let mut ins = Vec::with_capacity(node.inputs.len());
        let op = match &node.op {
            // The kernel into the blocked layout is a direct conv: each
            // tap's input read in place (gathered only at the padding).
            Op::Conv2d(p) if entries.contains(&n) => {
                ins.extend_from_slice(&node.inputs);
                Op::Conv2d(Conv2d {
                    data: DataLayout::NchwToNchw8c,
                    algo: ConvAlgo::Direct,
                    layout: WeightLayout::Auto,
                    ..p.clone()
                })
            }
            Op::Conv2d(p) => {
                ins.push(to_blocked(
                    g,
                    node.inputs[0],
                    &twin,
                    &mut into_blocks,
                    &mut stats,
                )?);
                ins.extend_from_slice(&node.inputs[1..]);
                // A Winograd conv records the algorithm it runs.
                let geom = ConvGeom::of_node(g, n).map_err(GraphError::UnknownValue)?;
                let algo = match blocked_kernel(&geom) {
                    Some(BlockedKernel::Winograd) => winograd_algo(&geom).unwrap_or(p.algo),
                    _ => p.algo,
                };
                Op::Conv2d(Conv2d {
                    data: DataLayout::Nchw8c,
                    layout: WeightLayout::Auto,
                    algo,
                    ..p.clone()
                })
            }
            Op::MaxPool(p) | Op::AveragePool(p) => {
                ins.push(to_blocked(
                    g,
                    node.inputs[0],
                    &twin,
                    &mut into_blocks,
                    &mut stats,
                )?);
                let p = dnnc_ir::op::Pool2d {
                    data: DataLayout::Nchw8c,
                    ..p.clone()
                };
                match node.op {
                    Op::MaxPool(_) => Op::MaxPool(p),
                    _ => Op::AveragePool(p),
                }
            }
            // Channel blocks are the blocked layout's axis 1.
            Op::Concat { .. } => {
                for &v in &node.inputs {
                    ins.push(to_blocked(g, v, &twin, &mut into_blocks, &mut stats)?);
                }
                Op::Concat { axis: 1 }
            }
            Op::Split { split, .. } => {
                let x = to_blocked(g, node.inputs[0], &twin, &mut into_blocks, &mut stats)?;
                let blocks = split.iter().map(|s| s / DataLayout::BLOCK).collect();
                let names: Vec<String> = node
                    .outputs
                    .iter()
                    .map(|&o| format!("{}.nchw8c", g.value(o).name))
                    .collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                let op = Op::Split {
                    axis: 1,
                    split: blocks,
                };
                let ts = g.add_node(op, &[x], &names)?;
                for (&o, t) in node.outputs.iter().zip(ts) {
                    twin.insert(o, t);
                    twins.push((o, t));
                }
                old_nodes.push(n);
                stats.rewrites += 1;
                continue;
            }
            op => {
                for &v in &node.inputs {
                    ins.push(if scalar(g, v) {
                        v
                    } else {
                        to_blocked(g, v, &twin, &mut into_blocks, &mut stats)?
                    });
                }
                op.clone()
            }
        };
        let name = g.value(out).name.clone();
        let t = g.add(op, &ins, &format!("{name}.nchw8c"))?;
        twin.insert(out, t);
        twins.push((out, t));
        old_nodes.push(n);
        stats.rewrites += 1;
    }
    let replaced: HashSet<NodeId> = old_nodes.iter().copied().collect();
    // A global average pool of a blocked value averages each channel
    // block's planes instead (`[N, C/8, 1, 1, 8]`, already NCHW order):
    // the reorder out moves C floats, not the whole map.
    let mut pools: Vec<NodeId> = Vec::new();
    for &(v, t) in &twins {
        for (u, _) in g.users(v) {
            let un = g.node(u);
            if !matches!(un.op, Op::GlobalAveragePool) || un.inputs[0] != v || replaced.contains(&u)
            {
                continue;
            }
            let out = un.outputs[0];
            let name = g.value(out).name.clone();
            let mean = g.add(
                Op::Reduce {
                    kind: ReduceKind::Mean,
                    axes: vec![2, 3],
                    keepdims: true,
                },
                &[t],
                &format!("{name}.nchw8c"),
            )?;
            let plain = from_blocked(g, mean, &name)?;
            g.replace_all_uses(out, plain)?;
            renames.push((plain, name));
            pools.push(u);
            stats.rewrites += 1;
        }
    }
    for &n in &pools {
        g.remove_node(n)?;
    }
    // Plain readers and graph outputs get a reordered copy, which takes
    // the original name; a value only blocked ops read takes it itself.
    for &(v, t) in &twins {
        let name = g.value(v).name.clone();
        let plain_use =
            g.outputs().contains(&v) || g.users(v).iter().any(|&(u, _)| !replaced.contains(&u));
        if plain_use {
            let plain = from_blocked(g, t, &name)?;
            g.replace_all_uses(v, plain)?;
            renames.push((plain, name));
            stats.rewrites += 1;
        } else {
            renames.push((t, name));
        }
    }
    for &n in old_nodes.iter().rev() {
        g.remove_node(n)?;
    }
    for (v, name) in renames {
        g.rename_value(v, &name)?;
    }
    stats.notes.push(format!(
        "{} ops in channel-blocked regions, {} reorders into the layout",
        old_nodes.len(),
        into_blocks.len()
    ));
    Ok(stats)
}

/// The blocked form of `v`: its twin, or a reorder of the plain tensor
/// (one per value, shared by its readers).
fn to_blocked(
    g: &mut Graph,
    v: ValueId,
    twin: &HashMap<ValueId, ValueId>,
    into_blocks: &mut HashMap<ValueId, ValueId>,
    stats: &mut PassStats,
) -> Result<ValueId, GraphError> {
    if let Some(&t) = twin.get(&v).or_else(|| into_blocks.get(&v)) {
        return Ok(t);
    }
    let name = g.value(v).name.clone();
    // A `[C, 1, 1]` channel operand broadcasts as `[1, C, 1, 1]`.
    let (v4, shape) = match *g.value(v).ty.shape.as_slice() {
        [c, 1, 1] => {
            let v4 = g.add(
                Op::Reshape {
                    shape: vec![1, c as i64, 1, 1],
                },
                &[v],
                &format!("{name}.nchw"),
            )?;
            (v4, [1, c, 1, 1])
        }
        [n, c, h, w] => (v, [n, c, h, w]),
        _ => {
            return Err(GraphError::UnknownValue(format!(
                "block-channels: {name} is not rank 4"
            )))
        }
    };
    let [n, c, h, w] = shape;
    let b = DataLayout::BLOCK;
    let split = g.add(
        Op::Reshape {
            shape: [n, c / b, b, h, w].map(|d| d as i64).to_vec(),
        },
        &[v4],
        &format!("{name}.blocks"),
    )?;
    let t = g.add(
        Op::Transpose {
            perm: vec![0, 1, 3, 4, 2],
        },
        &[split],
        &format!("{name}.to_nchw8c"),
    )?;
    into_blocks.insert(v, t);
    stats.rewrites += 1;
    Ok(t)
}

/// A plain `[N, C, H, W]` copy of blocked `t`, named `NAME.to_nchw` until
/// it takes `name`.
fn from_blocked(g: &mut Graph, t: ValueId, name: &str) -> Result<ValueId, GraphError> {
    let &[n, cb, h, w, b] = g.value(t).ty.shape.as_slice() else {
        return Err(GraphError::UnknownValue(format!(
            "block-channels: {} is not blocked",
            g.value(t).name
        )));
    };
    let moved = g.add(
        Op::Transpose {
            perm: vec![0, 1, 4, 2, 3],
        },
        &[t],
        &format!("{name}.planes"),
    )?;
    g.add(
        Op::Reshape {
            shape: [n, cb * b, h, w].map(|d| d as i64).to_vec(),
        },
        &[moved],
        &format!("{name}.to_nchw"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::text::{parse, print};

    /// A stem conv, then an inverted residual block: expand, depthwise,
    /// project, residual.
    const BLOCK: &str = "graph block {
      input %x: f32[1,8,8,8]
      param %ws: f32[16,8,1,1] = he(seed=5)
      param %we: f32[48,16,1,1] = he(seed=1)
      param %be: f32[48] = uniform(low=-0.1, high=0.1, seed=2)
      param %wd: f32[48,1,3,3] = he(seed=3)
      param %wp: f32[16,48,1,1] = he(seed=4)
      %s = Conv2d(%x, %ws)
      %e = Conv2d(%s, %we, %be)
      %e6 = Clip(%e) {min=0, max=6}
      %d = Conv2d(%e6, %wd) {pads=[1,1,1,1], group=48}
      %d6 = Clip(%d) {min=0, max=6}
      %p = Conv2d(%d6, %wp)
      %y = Add(%p, %s)
      output %y
    }";

    /// A bottleneck: pointwise, 3x3 Winograd, pointwise, then an Add of
    /// a residual from a dilated conv outside the region (no blocked
    /// kernel: kept plain).
    const BOTTLENECK: &str = "graph bottleneck {
      input %x: f32[1,8,8,8]
      param %wa: f32[32,8,1,1] = he(seed=1)
      param %wb: f32[32,32,3,3] = he(seed=2)
      param %wc: f32[64,32,1,1] = he(seed=3)
      param %ws: f32[64,8,3,3] = he(seed=4)
      %a = Conv2d(%x, %wa)
      %ar = Relu(%a)
      %b = Conv2d(%ar, %wb) {pads=[1,1,1,1], algo=winograd4}
      %br = Relu(%b)
      %c = Conv2d(%br, %wc)
      %s = Conv2d(%x, %ws) {pads=[2,2,2,2], dilations=[2,2], algo=im2col}
      %y = Add(%c, %s)
      %yr = Relu(%y)
      param %wd: f32[64,64,1,1] = he(seed=5)
      param %we: f32[64,64,1,1] = he(seed=6)
      param %wf: f32[64,64,1,1] = he(seed=7)
      %d = Conv2d(%yr, %wd)
      %e = Conv2d(%d, %we)
      %f = Conv2d(%e, %wf)
      %p = GlobalAveragePool(%f)
      output %p
    }";

    /// The Winograd conv joins the region; the dilated conv's result is
    /// reordered into the layout for the Add instead of the Add running
    /// plain.
    #[test]
    fn snapshot_bottleneck_with_winograd_and_plain_residual() {
        let (before, after, rewrites) = pass_on(BOTTLENECK);
        assert!(after.contains("algo=winograd4, data=nchw8c"), "{after}");
        assert!(after.contains("%s.to_nchw8c"), "{after}");
        insta::assert_snapshot!(snapshot_text(&before, &after, rewrites));
    }

    /// An Inception-style module: a 1x1 reduction, then 1x7 and 7x1, a
    /// 5x5 and stride-2 3x3s (im2col, the heuristic's choice for them)
    /// between 1x1 convs, their results joined by Concats.
    const DENSE_WINDOWS: &str = "graph dense_windows {
      input %x: f32[1,8,9,9]
      param %w0: f32[16,8,1,1] = he(seed=1)
      param %w1: f32[16,16,1,7] = he(seed=2)
      param %w2: f32[16,16,7,1] = he(seed=3)
      param %w3: f32[16,16,5,5] = he(seed=4)
      param %wh: f32[16,32,1,1] = he(seed=5)
      param %w4: f32[16,16,3,3] = he(seed=6)
      param %w5: f32[16,16,3,3] = he(seed=7)
      param %wy: f32[8,32,1,1] = he(seed=8)
      %a = Conv2d(%x, %w0)
      %b = Conv2d(%a, %w1) {pads=[0,3,0,3]}
      %c = Conv2d(%b, %w2) {pads=[3,0,3,0]}
      %d = Conv2d(%a, %w3) {pads=[2,2,2,2]}
      %e = Concat(%c, %d) {axis=1}
      %h = Conv2d(%e, %wh)
      %f = Conv2d(%h, %w4) {strides=[2,2]}
      %g = Conv2d(%a, %w5) {strides=[2,2]}
      %k = Concat(%f, %g) {axis=1}
      %y = Conv2d(%k, %wy)
      output %y
    }";

    /// Dense window convs join the region as `BlockedKernel::Window`:
    /// one reorder in, one out.
    #[test]
    fn snapshot_dense_window_convs_join_the_region() {
        let (before, after, rewrites) = pass_on(DENSE_WINDOWS);
        assert_eq!(after.matches("data=nchw8c").count(), 8, "{after}");
        assert_eq!(after.matches("Transpose").count(), 2, "{after}");
        insta::assert_snapshot!(snapshot_text(&before, &after, rewrites));
    }

    /// A RegNet block: its grouped 3x3 conv of eight channels a group
    /// joins the region as `BlockedKernel::Window` (stride 2, beside the
    /// strided projection), so only the input and the squeeze-excitation
    /// scale are reordered in, and the region's result out.
    #[test]
    fn snapshot_grouped_convs_of_eight_channels_join_the_region() {
        let text = "graph regnet_block {
          input %x: f32[1,8,16,16]
          param %wa: f32[40,8,1,1] = he(seed=1)
          param %wb: f32[40,8,3,3] = he(seed=2)
          param %ws1: f32[10,40,1,1] = he(seed=3)
          param %ws2: f32[40,10,1,1] = he(seed=4)
          param %wc: f32[40,40,1,1] = he(seed=5)
          param %wp: f32[40,8,1,1] = he(seed=6)
          param %wd: f32[40,40,1,1] = he(seed=7)
          %a = Conv2d(%x, %wa)
          %ar = Relu(%a)
          %b = Conv2d(%ar, %wb) {pads=[1,1,1,1], strides=[2,2], group=5}
          %br = Relu(%b)
          %g = GlobalAveragePool(%br)
          %g1 = Conv2d(%g, %ws1)
          %g1r = Relu(%g1)
          %g2 = Conv2d(%g1r, %ws2)
          %gs = Sigmoid(%g2)
          %m = Mul(%br, %gs)
          %c = Conv2d(%m, %wc)
          %p = Conv2d(%x, %wp) {strides=[2,2]}
          %s = Add(%c, %p)
          %sr = Relu(%s)
          %d = Conv2d(%sr, %wd)
          output %d
        }";
        let (before, after, rewrites) = pass_on(text);
        assert!(
            after.contains("group=5") && after.matches("data=nchw8c").count() >= 5,
            "{after}"
        );
        assert!(
            after.contains("%br: f32[1,5,8,8,8]") && after.matches("Transpose").count() == 4,
            "the grouped conv's result stays blocked: {after}"
        );
        insta::assert_snapshot!(snapshot_text(&before, &after, rewrites));
    }

    /// A ResNet-18-style stage (3x3 Winograd convs, a stride-2 3x3 and a
    /// stride-2 1x1 projection): no pointwise or depthwise conv gains
    /// from the layout, so the region is not blocked.
    #[test]
    fn regions_without_pointwise_or_depthwise_convs_stay_plain() {
        let text = "graph stage {
          input %x: f32[1,8,16,16]
          param %w1: f32[32,8,3,3] = he(seed=1)
          param %w2: f32[32,32,3,3] = he(seed=2)
          param %w3: f32[32,8,1,1] = he(seed=3)
          param %w4: f32[32,32,3,3] = he(seed=4)
          param %w5: f32[32,32,3,3] = he(seed=5)
          param %w6: f32[32,32,3,3] = he(seed=6)
          param %w7: f32[32,32,3,3] = he(seed=7)
          param %w8: f32[32,32,3,3] = he(seed=8)
          param %w9: f32[32,32,3,3] = he(seed=9)
          %a = Conv2d(%x, %w1) {pads=[1,1,1,1], strides=[2,2]}
          %ar = Relu(%a)
          %b = Conv2d(%ar, %w2) {pads=[1,1,1,1], algo=winograd4}
          %p = Conv2d(%x, %w3) {strides=[2,2]}
          %s = Add(%b, %p)
          %sr = Relu(%s)
          %c = Conv2d(%sr, %w4) {pads=[1,1,1,1], algo=winograd4}
          %d = Conv2d(%c, %w5) {pads=[1,1,1,1], algo=winograd4}
          %e = Conv2d(%d, %w6) {pads=[1,1,1,1], algo=winograd4}
          %f = Conv2d(%e, %w7) {pads=[1,1,1,1], algo=winograd4}
          %h = Conv2d(%f, %w8) {pads=[1,1,1,1], algo=winograd4}
          %i = Conv2d(%h, %w9) {pads=[1,1,1,1], algo=winograd4}
          output %i
        }";
        let (before, after, rewrites) = pass_on(text);
        assert_eq!(rewrites, 0, "{after}");
        assert_eq!(before, after);
    }

    /// `text` parsed, then after the pass (verified): the two printed and
    /// the pass's rewrite count.
    fn pass_on(text: &str) -> (String, String, usize) {
        let mut g = parse(text, "t.dnn").unwrap();
        let before = print(&g);
        let stats = block_channels(&mut g).unwrap();
        dnnc_ir::verify(&g).unwrap();
        (before, print(&g), stats.rewrites)
    }

    /// A snapshot's text: the IR before and after the pass.
    fn snapshot_text(before: &str, after: &str, rewrites: usize) -> String {
        format!("{before}--- block-channels ({rewrites} rewrites) --->\n{after}")
    }

    /// An inception module as the optimiser leaves it: the three branch
    /// convs that read the module's input merged into one, whose result a
    /// channel Split hands out (one part straight to the Concat), a max
    /// pool branch, and the Concat.
    const MERGED_INCEPTION: &str = "graph merged {
      input %x: f32[1,16,8,8]
      param %w0: f32[16,16,1,1] = he(seed=1)
      param %wm: f32[40,16,1,1] = he(seed=2)
      param %w2: f32[24,16,3,3] = he(seed=3)
      param %w3: f32[8,8,3,3] = he(seed=4)
      param %w4: f32[8,16,1,1] = he(seed=5)
      %s = Conv2d(%x, %w0)
      %sr = Relu(%s)
      %m = Conv2d(%sr, %wm)
      %mr = Relu(%m)
      %b2, %b3, %b1 = Split(%mr) {axis=1, split=[16,8,16]}
      %c2 = Conv2d(%b2, %w2) {pads=[1,1,1,1], algo=winograd4}
      %c3 = Conv2d(%b3, %w3) {pads=[1,1,1,1], algo=winograd2}
      %p = MaxPool(%sr) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
      %c4 = Conv2d(%p, %w4)
      %y = Concat(%b1, %c2, %c3, %c4) {axis=1}
      %g = GlobalAveragePool(%y)
      output %g
    }";

    /// The Split joins the region as a Split of whole channel blocks
    /// (sizes in blocks), so the merged conv's parts feed the branch
    /// convs and the Concat blocked, and the module computes what it did.
    #[test]
    fn snapshot_merged_branches_split_blocked() {
        let (before, after, rewrites) = pass_on(MERGED_INCEPTION);
        assert!(
            after.contains("= Split(%mr) {axis=1, split=[2,1,2]}"),
            "{after}"
        );
        assert!(
            after.contains("%b2: f32[1,2,8,8,8]"),
            "the parts are blocked: {after}"
        );
        insta::assert_snapshot!(snapshot_text(&before, &after, rewrites));
        let (_, want, got) = before_after(MERGED_INCEPTION, [1, 16, 8, 8]);
        assert_close(&got, &want);
        // Parts not in whole blocks keep the Split (and its region) plain.
        let odd = MERGED_INCEPTION
            .replace("split=[16,8,16]", "split=[12,12,16]")
            .replace("f32[24,16,3,3]", "f32[24,12,3,3]")
            .replace("f32[8,8,3,3]", "f32[8,12,3,3]");
        assert!(pass_on(&odd).1.contains("split=[12,12,16]"));
        let (_, want, got) = before_after(&odd, [1, 16, 8, 8]);
        assert_close(&got, &want);
    }

    #[test]
    fn snapshot_inverted_residual_block() {
        let (before, after, rewrites) = pass_on(BLOCK);
        insta::assert_snapshot!(snapshot_text(&before, &after, rewrites));
    }

    #[test]
    fn short_chains_and_unfit_convs_stay_plain() {
        // Two convs: fewer than MIN_CONVS.
        let two = "graph two {
          input %x: f32[1,16,8,8]
          param %w1: f32[16,16,1,1] = he(seed=1)
          param %w2: f32[16,1,3,3] = he(seed=2)
          %a = Conv2d(%x, %w1)
          %b = Conv2d(%a, %w2) {pads=[1,1,1,1], group=16}
          output %b
        }";
        // Three convs, but channels not in blocks of 8, a dilated
        // depthwise conv and a forced algorithm.
        let unfit = "graph unfit {
          input %x: f32[1,12,8,8]
          param %w1: f32[12,12,1,1] = he(seed=1)
          param %w2: f32[16,12,1,1] = he(seed=2)
          param %w3: f32[16,1,3,3] = he(seed=3)
          param %w4: f32[16,16,1,1] = he(seed=4)
          %a = Conv2d(%x, %w1)
          %b = Conv2d(%a, %w2)
          %c = Conv2d(%b, %w3) {pads=[2,2,2,2], dilations=[2,2], group=16}
          %d = Conv2d(%c, %w4) {algo=im2col}
          output %d
        }";
        for text in [two, unfit] {
            let mut g = parse(text, "t.dnn").unwrap();
            let before = print(&g);
            let stats = block_channels(&mut g).unwrap();
            assert_eq!(stats.rewrites, 0);
            assert_eq!(print(&g), before);
        }
    }

    /// `text`'s first output on the interpreter before and after the
    /// pass, for input `x` of `shape` (a ramp).
    fn before_after(text: &str, shape: [usize; 4]) -> (Graph, Vec<f32>, Vec<f32>) {
        let plain = parse(text, "t.dnn").unwrap();
        let mut g = plain.clone();
        block_channels(&mut g).unwrap();
        dnnc_ir::verify(&g).unwrap();
        let n: usize = shape.iter().product();
        let x = dnnc_ir::Tensor::F32(ndarray::ArrayD::from_shape_fn(shape.to_vec(), |i| {
            let flat = ((i[0] * shape[1] + i[1]) * shape[2] + i[2]) * shape[3] + i[3];
            flat as f32 * 2.0 / n as f32 - 1.0
        }));
        let run = |g: &Graph| {
            let out = dnnc_runtime::run(g, &[("x".to_string(), x.clone())]).unwrap();
            out[0]
                .as_f32()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<f32>>()
        };
        let (want, got) = (run(&plain), run(&g));
        (g, want, got)
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-5 + 1e-5 * b.abs(), "{a} vs {b}");
        }
    }

    #[test]
    fn per_channel_operands_are_reordered_not_the_map() {
        // The Mul by a [1,C,1,1] scale runs blocked on a reordered copy
        // of the scale (C elements), broadcast over both images; the map
        // is reordered once, for the output, which keeps its name.
        let text = "graph scale {
          input %x: f32[2,8,8,8]
          param %w1: f32[32,8,1,1] = he(seed=1)
          param %w2: f32[32,1,3,3] = he(seed=2)
          param %w3: f32[32,32,1,1] = he(seed=3)
          param %w4: f32[32,1,3,3] = he(seed=5)
          param %w5: f32[16,32,1,1] = he(seed=6)
          param %s: f32[1,16,1,1] = uniform(low=0.5, high=1.5, seed=4)
          %a = Conv2d(%x, %w1)
          %b = Conv2d(%a, %w2) {pads=[1,1,1,1], group=32}
          %b2 = Conv2d(%b, %w3)
          %b3 = Conv2d(%b2, %w4) {pads=[1,1,1,1], group=32}
          %c = Conv2d(%b3, %w5)
          %y = Mul(%c, %s)
          output %y
        }";
        let (g, want, got) = before_after(text, [2, 8, 8, 8]);
        assert_eq!(g.value(g.outputs()[0]).name, "y");
        assert!(g.value_by_name("c.planes").is_none(), "{}", print(&g));
        let scale = g.value_by_name("s.to_nchw8c").expect("scale reordered");
        assert_eq!(g.value(scale).ty.shape, [1, 2, 1, 1, 8]);
        let y = g.value_by_name("y.nchw8c").expect("blocked Mul");
        assert_eq!(g.value(y).ty.shape, [2, 2, 8, 8, 8]);
        assert_close(&got, &want);
    }

    #[test]
    fn rank_3_channel_operands_are_reordered_not_the_map() {
        // A `[C,1,1]` bias after a pool (the optimiser moves Inception's
        // pool-branch bias past the pool) is reshaped to `[1,C,1,1]` and
        // reordered; the map stays blocked through the Add and the Relu.
        let text = "graph bias3 {
          input %x: f32[2,8,8,8]
          param %w1: f32[32,8,1,1] = he(seed=1)
          param %w2: f32[32,32,1,1] = he(seed=2)
          param %w3: f32[8,32,1,1] = he(seed=3)
          param %b: f32[32,1,1] = uniform(low=-0.5, high=0.5, seed=4)
          %a = Conv2d(%x, %w1)
          %p = AveragePool(%a) {kernel=[3,3], pads=[1,1,1,1]}
          %pb = Add(%p, %b)
          %r = Relu(%pb)
          %c = Conv2d(%r, %w2)
          %y = Conv2d(%c, %w3)
          output %y
        }";
        let (g, want, got) = before_after(text, [2, 8, 8, 8]);
        let bias = g.value_by_name("b.to_nchw8c").expect("bias reordered");
        assert_eq!(g.value(bias).ty.shape, [1, 4, 1, 1, 8]);
        let pb = g.value_by_name("pb").expect("the Add");
        assert_eq!(g.value(pb).ty.shape, [2, 4, 8, 8, 8], "{}", print(&g));
        assert_close(&got, &want);
    }

    #[test]
    fn squeeze_excitation_stays_in_the_region() {
        // EfficientNet's block: expand, depthwise, squeeze-excitation
        // (pool, two small convs, sigmoid, per-image channel scale),
        // project. The pool is a blocked mean and the scale a reordered
        // [N,C,1,1]; no map leaves the blocked layout until the output.
        let text = "graph se {
          input %x: f32[2,8,6,6]
          param %we: f32[32,8,1,1] = he(seed=1)
          param %wd: f32[32,1,5,5] = he(seed=2)
          param %ws1: f32[4,32,1,1] = he(seed=3)
          param %bs1: f32[4] = uniform(low=-0.1, high=0.1, seed=4)
          param %ws2: f32[32,4,1,1] = he(seed=5)
          param %bs2: f32[32] = uniform(low=-0.1, high=0.1, seed=6)
          param %wp: f32[8,32,1,1] = he(seed=7)
          %e = Conv2d(%x, %we)
          %es = Sigmoid(%e)
          %e2 = Mul(%e, %es)
          %d = Conv2d(%e2, %wd) {pads=[2,2,2,2], group=32}
          %p = GlobalAveragePool(%d)
          %s1 = Conv2d(%p, %ws1, %bs1)
          %s1r = Relu(%s1)
          %s2 = Conv2d(%s1r, %ws2, %bs2)
          %sc = Sigmoid(%s2)
          %m = Mul(%d, %sc)
          %y = Conv2d(%m, %wp)
          output %y
        }";
        let (g, want, got) = before_after(text, [2, 8, 6, 6]);
        let printed = print(&g);
        assert!(!printed.contains("GlobalAveragePool"), "{printed}");
        for map in ["e", "e2", "d", "m"] {
            assert!(
                g.value_by_name(&format!("{map}.planes")).is_none(),
                "{map} reordered: {printed}"
            );
        }
        let m = g.value_by_name("m").expect("blocked Mul keeps the name");
        assert_eq!(g.value(m).ty.shape, [2, 4, 6, 6, 8]);
        // The excitation conv (4 input channels) writes the scale blocked
        // itself, as a stem does.
        let sc = g.value_by_name("sc").expect("the scale");
        assert_eq!(g.value(sc).ty.shape, [2, 4, 1, 1, 8], "{printed}");
        assert_close(&got, &want);
    }

    #[test]
    fn bounds_are_the_runtime_kernels() {
        assert_eq!(DW_MAX_ROWS, dnnc_runtime::cpu::dwrow::DW_ROW_MAX_KH);
    }

    #[test]
    fn global_pools_average_the_blocked_planes() {
        // The pool reads the blocked result: a ReduceMean over its planes
        // ([1, 2, 1, 1, 8], NCHW order already) is reordered, not the map;
        // the pool's result keeps its name and the interpreter's values.
        let text = "graph head {
          input %x: f32[1,8,6,6]
          param %w1: f32[32,8,1,1] = he(seed=1)
          param %w2: f32[32,1,3,3] = he(seed=2)
          param %w3: f32[32,32,1,1] = he(seed=3)
          param %w4: f32[32,1,3,3] = he(seed=4)
          param %w5: f32[16,32,1,1] = he(seed=5)
          %a = Conv2d(%x, %w1)
          %b = Conv2d(%a, %w2) {pads=[1,1,1,1], group=32}
          %b2 = Conv2d(%b, %w3)
          %b3 = Conv2d(%b2, %w4) {pads=[1,1,1,1], group=32}
          %c = Conv2d(%b3, %w5)
          %p = GlobalAveragePool(%c)
          %f = Flatten(%p) {axis=1}
          output %f
        }";
        let (g, want, got) = before_after(text, [1, 8, 6, 6]);
        let printed = print(&g);
        assert!(!printed.contains("GlobalAveragePool"), "{printed}");
        let mean = g.value_by_name("p.nchw8c").expect("blocked mean");
        assert_eq!(g.value(mean).ty.shape, [1, 2, 1, 1, 8]);
        let p = g.value_by_name("p").expect("the pool's name");
        assert_eq!(g.value(p).ty.shape, [1, 16, 1, 1]);
        assert!(g.value_by_name("c.planes").is_none(), "{printed}");
        assert_eq!(want.len(), 16);
        assert_close(&got, &want);
    }

    /// A filter layout pinned for NCHW GEMMs (`layout=lanes` or
    /// `panels`, as the e-graph pins it) does not keep a conv out of the
    /// region: the same chain blocks as without it, every blocked conv's
    /// layout back to `auto`, the values unchanged.
    #[test]
    fn pinned_filter_layouts_are_blocked_and_dropped() {
        let pinned = BLOCK
            .replace(
                "%e = Conv2d(%s, %we, %be)",
                "%e = Conv2d(%s, %we, %be) {layout=lanes}",
            )
            .replace(
                "%p = Conv2d(%d6, %wp)",
                "%p = Conv2d(%d6, %wp) {layout=panels}",
            );
        assert!(pinned.contains("layout=lanes") && pinned.contains("layout=panels"));
        let (g, want, got) = before_after(&pinned, [1, 8, 8, 8]);
        let mut plain = parse(BLOCK, "block.dnn").unwrap();
        block_channels(&mut plain).unwrap();
        assert_eq!(print(&g), print(&plain));
        for n in g.topo_order() {
            if let Op::Conv2d(p) = &g.node(n).op {
                assert_eq!(p.layout, WeightLayout::Auto, "{}", print(&g));
            }
        }
        assert_close(&got, &want);
    }
}
