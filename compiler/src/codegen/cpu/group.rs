//! Kernels of the CPU backend, from the fusion pass
//! (`dnnc_passes::fusion::fuse`): a contraction or reduction with its
//! elementwise epilogue, an elementwise chain, one data-movement op, or a
//! view. [`kernels`] adapts the pass's grouping to what the lowerings
//! handle: a kernel whose nodes cannot all be evaluated together is split
//! into one-node kernels, and results nobody reads still get a buffer (a
//! Split's unused piece must be written somewhere).

use dnnc_ir::{Graph, NodeId, Op, OpClass, ValueId};
use dnnc_passes::fusion::{self, KernelKind as FusedKind};
use std::collections::{BTreeSet, HashMap, HashSet};

/// What kind of loop nest a kernel becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelKind {
    /// GEMM-based: Conv2d, Gemm, MatMul, plus an elementwise epilogue.
    Contraction,
    /// One loop nest over the output evaluating a chain of nodes.
    Elementwise,
    /// Pools, reductions, normalisations, plus an elementwise epilogue.
    Reduction,
    /// Strided copies and generated fills.
    DataMovement,
    /// A buffer alias; no code.
    View,
}

/// One generated function's worth of nodes.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    /// Name (the last node's first result, as the fusion pass names it).
    pub name: String,
    /// Kind.
    pub kind: KernelKind,
    /// The node that determines the loop structure.
    pub anchor: Option<NodeId>,
    /// Nodes in topological order, anchor first.
    pub nodes: Vec<NodeId>,
    /// Values read from outside the kernel.
    pub inputs: Vec<ValueId>,
    /// Values used outside the kernel (or graph outputs), plus results
    /// nobody uses that the kernel must still write.
    pub outputs: Vec<ValueId>,
    /// Per-channel nodes computed on the anchor's data input as its GEMM
    /// packs it ([`absorb_prologues`]), in order; their results get no
    /// buffer.
    pub prologue: Vec<NodeId>,
    /// A channel-blocked pointwise conv and its clamp, computed inside
    /// this blocked depthwise conv's kernel a few rows at a time
    /// ([`absorb_expansions`]), in order; their results get no buffer.
    pub expansion: Vec<NodeId>,
    /// A channel-blocked pointwise conv and its bias, residual and clamp
    /// applied to this blocked depthwise conv's output rows as they are
    /// computed ([`absorb_projections`]), in order; the depthwise result
    /// gets no buffer, and the kernel's outputs are the projection's.
    pub projection: Vec<NodeId>,
    /// A max pool of this im2col conv's (clamped) result, computed from
    /// bands of conv rows as the kernel produces them ([`absorb_pools`]);
    /// the conv result gets no buffer, and the kernel's outputs are the
    /// pool's.
    pub pool: Vec<NodeId>,
    /// A channel Concat whose result this pointwise conv's GEMM reads row
    /// by row from the Concat's operands ([`absorb_concats`]): the
    /// concatenation gets no buffer and is never copied.
    pub concat: Option<NodeId>,
}

impl Kernel {
    /// Every node the kernel computes, in order: concat, prologue,
    /// expansion, its own nodes, projection, pool.
    pub fn all_nodes(&self) -> impl Iterator<Item = &NodeId> {
        self.concat
            .iter()
            .chain(&self.prologue)
            .chain(&self.expansion)
            .chain(&self.nodes)
            .chain(&self.projection)
            .chain(&self.pool)
    }
}

/// Whether `op` is evaluable per point: an elementwise op that both
/// backends' point evaluators (`cpu::elementwise`, `gpu::point`) compute
/// element by element, so it may stand in an elementwise chain or a
/// fused epilogue. An elementwise kernel with any other node is split
/// into one-node kernels.
pub(crate) fn per_point(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::PRelu
            | Op::BatchNormalization { .. }
            | Op::Where
            | Op::Compare(_)
            | Op::Not
            | Op::Logical(_)
            | Op::Cast { .. }
    )
}

/// The kind a single node gets on its own.
fn kind_of(op: &Op) -> KernelKind {
    if matches!(op, Op::Range(_)) {
        // A generated sequence: no operands to evaluate per point.
        return KernelKind::DataMovement;
    }
    match op.class() {
        OpClass::Contraction => KernelKind::Contraction,
        OpClass::Elementwise => KernelKind::Elementwise,
        OpClass::Reduction => KernelKind::Reduction,
        OpClass::View => KernelKind::View,
        OpClass::DataMovement | OpClass::Source => KernelKind::DataMovement,
    }
}

/// The graph's kernels in execution order.
pub(crate) fn kernels(g: &Graph) -> Vec<Kernel> {
    let graph_outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
    let mut out = Vec::new();
    for k in fusion::fuse(g).kernels {
        let kind = match k.kind {
            FusedKind::Contraction => KernelKind::Contraction,
            FusedKind::Elementwise => KernelKind::Elementwise,
            FusedKind::Reduction => KernelKind::Reduction,
            FusedKind::DataMovement => KernelKind::DataMovement,
            FusedKind::View => KernelKind::View,
        };
        // An elementwise chain must be evaluable per point; otherwise (a
        // Range head) every node becomes its own kernel.
        let splittable =
            kind == KernelKind::Elementwise && k.nodes.iter().any(|&n| !per_point(&g.node(n).op));
        if splittable || (k.nodes.len() == 1 && kind_of(&g.node(k.nodes[0]).op) != kind) {
            for &n in &k.nodes {
                out.push(finish(g, &graph_outputs, vec![n], kind_of(&g.node(n).op)));
            }
            continue;
        }
        let mut kernel = Kernel {
            name: k.name,
            kind,
            anchor: k.anchor.or(k.nodes.first().copied()),
            nodes: k.nodes,
            inputs: k.inputs,
            outputs: k.outputs,
            prologue: Vec::new(),
            expansion: Vec::new(),
            projection: Vec::new(),
            pool: Vec::new(),
            concat: None,
        };
        add_dead_results(g, &graph_outputs, &mut kernel);
        out.push(kernel);
    }
    out
}

/// Adds results that have no user at all (and are not graph outputs).
fn add_dead_results(g: &Graph, graph_outputs: &HashSet<ValueId>, k: &mut Kernel) {
    for &n in &k.nodes {
        for &v in &g.node(n).outputs {
            if !k.outputs.contains(&v) && g.users(v).is_empty() && !graph_outputs.contains(&v) {
                k.outputs.push(v);
            }
        }
    }
}

/// A kernel of `nodes` with its inputs and outputs computed.
fn finish(
    g: &Graph,
    graph_outputs: &HashSet<ValueId>,
    nodes: Vec<NodeId>,
    kind: KernelKind,
) -> Kernel {
    let inside: HashSet<NodeId> = nodes.iter().copied().collect();
    let mut inputs = Vec::new();
    let mut outs = Vec::new();
    for &n in &nodes {
        for &v in &g.node(n).inputs {
            if !inside.contains(&g.value(v).producer) && !inputs.contains(&v) {
                inputs.push(v);
            }
        }
        for &v in &g.node(n).outputs {
            let external =
                graph_outputs.contains(&v) || g.users(v).iter().any(|(u, _)| !inside.contains(u));
            if external {
                outs.push(v);
            }
        }
    }
    let anchor = nodes[0];
    let name = g
        .node(anchor)
        .outputs
        .first()
        .map(|&v| g.value(v).name.clone())
        .unwrap_or_else(|| format!("#{}", anchor.index()));
    let mut k = Kernel {
        name,
        kind,
        anchor: Some(anchor),
        nodes,
        inputs,
        outputs: outs,
        prologue: Vec::new(),
        expansion: Vec::new(),
        projection: Vec::new(),
        pool: Vec::new(),
        concat: None,
    };
    add_dead_results(g, graph_outputs, &mut k);
    k
}

/// A conv's input transform that its packed GEMM applies as it packs B
/// ([`dnnc_runtime::cpu::pgemm::Prologue`]): an inference
/// BatchNormalization with constant parameters, then at most a Relu or a
/// Clip (constant bounds), each result read only by the next, the last
/// only by the conv. `(bn, lo, hi)`: the BatchNormalization node and the
/// clamp bounds.
pub(crate) fn prologue_of(g: &Graph, nodes: &[NodeId]) -> Option<(NodeId, f32, f32)> {
    let (&bn, rest) = nodes.split_first()?;
    let node = g.node(bn);
    if !matches!(node.op, Op::BatchNormalization { .. }) || node.inputs.len() != 5 {
        return None;
    }
    let x = g.value(node.inputs[0]);
    if x.ty.dtype != dnnc_ir::DType::F32 || x.ty.rank() != 4 {
        return None;
    }
    let c = x.ty.shape[1];
    let consts = node.inputs[1..].iter().all(|&p| {
        let t = &g.value(p).ty;
        t.dtype == dnnc_ir::DType::F32 && t.shape == [c] && g.weight(p).is_ok()
    });
    if !consts {
        return None;
    }
    let (lo, hi) = match rest {
        [] => (f32::NEG_INFINITY, f32::INFINITY),
        [a] => match (&g.node(*a).op, g.node(*a).inputs.as_slice()) {
            (Op::Unary(dnnc_ir::op::Unary::Relu), &[v]) if v == node.outputs[0] => {
                (0.0, f32::INFINITY)
            }
            (Op::Unary(dnnc_ir::op::Unary::Clip { min, max }), &[v])
                if v == node.outputs[0] && min <= max =>
            {
                (*min, *max)
            }
            _ => return None,
        },
        _ => return None,
    };
    Some((bn, lo, hi))
}

/// `kernels` (in a topological order) reordered so that the kernels
/// reading the same activation run one after another: of the kernels
/// whose inputs are all computed, the next is the first (in the given
/// order) that reads an activation the previous kernel read, else one
/// that reads the most recently computed activation, else the first.
/// Single-threaded runs (and the steps of each wave at more
/// threads) follow this order, so in a GoogLeNet inception module the
/// four branches' 1x1 convs and pool read the block input back to back
/// instead of the branch-2 3x3 conv and its workspaces evicting it in
/// between: inception 3a's branch-3 1x1 conv (16 x 784 x 192) ran at 0.25
/// ms after branch 2's 3x3 conv against 0.14 right after the other 1x1
/// convs (AMD EPYC, one thread). Weights are not activations: sharing one
/// does not make two kernels neighbours.
pub(crate) fn order_for_locality(g: &Graph, kernels: Vec<Kernel>) -> Vec<Kernel> {
    let n = kernels.len();
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (i, k) in kernels.iter().enumerate() {
        for &v in &k.outputs {
            producer.insert(v, i);
        }
    }
    let reads: Vec<Vec<ValueId>> = kernels
        .iter()
        .map(|k| {
            k.inputs
                .iter()
                .copied()
                .filter(|&v| g.weight(v).is_err())
                .collect()
        })
        .collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (i, k) in kernels.iter().enumerate() {
        let mut deps: Vec<usize> = k
            .inputs
            .iter()
            .filter_map(|v| producer.get(v).copied())
            .filter(|&p| p != i)
            .collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[i] = deps.len();
        for p in deps {
            users[p].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    let mut last: Option<usize> = None;
    // When each activation was computed (its producer's place in `order`).
    let mut made: HashMap<ValueId, usize> = HashMap::new();
    while let Some(&first) = ready.iter().next() {
        let sibling = last.and_then(|l| {
            ready
                .iter()
                .copied()
                .find(|&r| reads[r].iter().any(|v| reads[l].contains(v)))
        });
        // Else the reader of the most recently computed activation (the
        // first such kernel on a tie), else the first.
        let recent = || {
            ready
                .iter()
                .copied()
                .filter_map(|r| {
                    reads[r]
                        .iter()
                        .filter_map(|v| made.get(v))
                        .max()
                        .map(|&t| (t, r))
                })
                .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)))
                .map(|(_, r)| r)
        };
        let next = sibling.or_else(recent).unwrap_or(first);
        ready.remove(&next);
        for &v in &kernels[next].outputs {
            made.insert(v, order.len());
        }
        order.push(next);
        last = Some(next);
        for &u in &users[next] {
            waiting[u] -= 1;
            if waiting[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != n {
        // Not a DAG of kernels (cannot happen for a verified graph): keep
        // the given order.
        return kernels;
    }
    let mut slots: Vec<Option<Kernel>> = kernels.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// Moves each elementwise kernel that only feeds a conv's data input
/// and is a [`prologue_of`] into that conv's kernel as its prologue,
/// where `takes(k)` says the conv's lowering applies one (a pointwise
/// conv on the packed GEMM's panels layout). The intermediate result is
/// then never written: DenseNet's pre-activation BatchNormalization +
/// Relu over its growing concatenation ran as memory-bound passes, 14% of
/// DenseNet-121's time at batch 8.
pub(crate) fn absorb_prologues(
    g: &Graph,
    kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel) -> bool,
) -> Vec<Kernel> {
    absorb(g, kernels, takes, Slot::Prologue, |_, p| {
        p.kind == KernelKind::Elementwise && prologue_of(g, &p.nodes).is_some()
    })
}

/// Moves each kernel that is one channel Concat of NCHW f32 tensors
/// (its result no graph output, read by nothing but the data inputs of
/// conv kernels `k` (or their prologues) with `takes(k)`; a copy: its
/// pieces not contiguous, as at batch > 1, or an operand another Concat
/// takes too) into every such `k`: each then reads the Concat's
/// operands, its GEMM packing B's rows from them through a row table
/// (`pgemm::Gather`), so the concatenation is never written.
///
/// DenseNet concatenates every earlier layer's output anew before each
/// layer's 1x1 conv: at batch 8 that copied 338 MB over its 62 Concats,
/// which a channel slice of one buffer cannot avoid (an image's channels
/// are not contiguous across images), and at batch 1 only one Concat of
/// such a chain can be built in place.
pub(crate) fn absorb_concats(
    g: &Graph,
    mut kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel) -> bool,
) -> Vec<Kernel> {
    let graph_outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
    let nchw = |x: ValueId| {
        let t = &g.value(x).ty;
        t.dtype == dnnc_ir::DType::F32 && t.shape.len() == 4
    };
    // The node of kernel `k` that reads its data input: the prologue's
    // first, or the anchor.
    let reader = |k: &Kernel| k.prologue.first().copied().or(k.anchor);
    let mut gone = vec![false; kernels.len()];
    for pi in 0..kernels.len() {
        let p = &kernels[pi];
        let (concat, v) = match (p.nodes.as_slice(), p.outputs.as_slice()) {
            ([n], [v]) if matches!(g.node(*n).op, Op::Concat { axis: 1 }) => (*n, *v),
            _ => continue,
        };
        let node = g.node(concat);
        // A Concat whose pieces are contiguous (batch 1) and whose
        // operands no other Concat takes is built in place by its
        // producers at no cost (`in_place_concats`): it stays.
        let shared = node.inputs.iter().any(|&x| {
            g.users(x)
                .iter()
                .any(|&(u, _)| u != concat && matches!(g.node(u).op, Op::Concat { .. }))
        });
        let copied = !dnnc_ir::infer::contiguous_pieces(&g.value(v).ty.shape, 1) || shared;
        let fits = copied
            && !graph_outputs.contains(&v)
            && nchw(v)
            && !node.inputs.is_empty()
            && node.inputs.iter().all(|&x| nchw(x) && g.weight(x).is_err());
        if !fits {
            continue;
        }
        // Every user reads it as the data input of a kernel that takes it.
        let mut readers = Vec::new();
        let users = g.users(v);
        for &(u, slot) in &users {
            let k = (slot == 0)
                .then(|| {
                    kernels.iter().position(|k| {
                        reader(k) == Some(u)
                            && k.concat.is_none()
                            && k.expansion.is_empty()
                            && k.projection.is_empty()
                            && k.pool.is_empty()
                    })
                })
                .flatten()
                .filter(|&ki| {
                    ki != pi && !gone[ki] && !readers.contains(&ki) && takes(&kernels[ki])
                });
            match k {
                Some(ki) => readers.push(ki),
                None => break,
            }
        }
        if users.is_empty() || readers.len() != users.len() {
            continue;
        }
        let parts = p.inputs.clone();
        for ki in readers {
            let k = &mut kernels[ki];
            let mut merged = parts.clone();
            add_inputs(&mut merged, &k.inputs, v);
            k.inputs = merged;
            k.concat = Some(concat);
        }
        gone[pi] = true;
    }
    without(kernels, &gone)
}

/// The kernel that computes the data input `v` of kernel `ki`'s anchor,
/// when `v` is its only output and nothing but that anchor reads it (nor
/// is it a graph output): its index and `v`.
fn sole_feeder(
    g: &Graph,
    kernels: &[Kernel],
    ki: usize,
    graph_outputs: &HashSet<ValueId>,
) -> Option<(usize, ValueId)> {
    let anchor = kernels[ki].anchor?;
    let v = *g.node(anchor).inputs.first()?;
    let pi = kernels.iter().position(|p| p.outputs.contains(&v))?;
    let p = &kernels[pi];
    let sole_user = matches!(g.users(v).as_slice(), [(u, 0)] if *u == anchor);
    let fits = pi != ki
        && sole_user
        && p.outputs == [v]
        && !graph_outputs.contains(&v)
        && p.nodes.last().map(|&n| g.node(n).outputs.first()) == Some(Some(&v));
    fits.then_some((pi, v))
}

/// Appends to `inputs` those of `more` it lacks, except `v` (the value
/// the merged kernels passed between them).
fn add_inputs(inputs: &mut Vec<ValueId>, more: &[ValueId], v: ValueId) {
    for &i in more {
        if i != v && !inputs.contains(&i) {
            inputs.push(i);
        }
    }
}

/// `kernels` without those marked `gone` (merged into another).
fn without(kernels: Vec<Kernel>, gone: &[bool]) -> Vec<Kernel> {
    kernels
        .into_iter()
        .zip(gone)
        .filter_map(|(k, &gone)| (!gone).then_some(k))
        .collect()
}

/// Where [`absorb`] puts a producer's nodes.
#[derive(Clone, Copy)]
enum Slot {
    Prologue,
    Expansion,
}

/// Moves each kernel `p` whose one result only the data input of a conv
/// kernel `k` reads, with `takes(k)` and `fits(p)`, into `k` as its
/// prologue or expansion (`slot`): `k` then reads `p`'s inputs, and `p`'s
/// result gets no buffer.
fn absorb(
    g: &Graph,
    mut kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel) -> bool,
    slot: Slot,
    fits: impl Fn(&Kernel, &Kernel) -> bool,
) -> Vec<Kernel> {
    let graph_outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
    let mut gone = vec![false; kernels.len()];
    for ki in 0..kernels.len() {
        let k = &kernels[ki];
        let Some(anchor) = k.anchor else { continue };
        if k.kind != KernelKind::Contraction
            || !matches!(g.node(anchor).op, Op::Conv2d(_))
            || !k.prologue.is_empty()
            || !k.expansion.is_empty()
            || !takes(k)
        {
            continue;
        }
        let Some((pi, v)) = sole_feeder(g, &kernels, ki, &graph_outputs) else {
            continue;
        };
        let p = &kernels[pi];
        if gone[pi] || !p.prologue.is_empty() || !p.expansion.is_empty() || !fits(k, p) {
            continue;
        }
        let (nodes, mut inputs) = (p.nodes.clone(), p.inputs.clone());
        let k = &mut kernels[ki];
        add_inputs(&mut inputs, &k.inputs, v);
        k.inputs = inputs;
        match slot {
            Slot::Prologue => k.prologue = nodes,
            Slot::Expansion => k.expansion = nodes,
        }
        gone[pi] = true;
    }
    without(kernels, &gone)
}

/// Whether conv node `n` is a channel-blocked pointwise conv (1x1,
/// stride 1, no padding, one group).
fn blocked_pointwise(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let Op::Conv2d(p) = &node.op else {
        return false;
    };
    p.data == dnnc_ir::op::DataLayout::Nchw8c
        && p.group == 1
        && p.strides == [1, 1]
        && p.pads.iter().all(|&v| v == 0)
        && g.value(node.inputs[1]).ty.shape[2..] == [1, 1]
        && node.outputs.len() == 1
}

/// The bounds of an optional clamp after node `n`: `rest` is empty or
/// one Relu or Clip (constant bounds) of `n`'s result.
pub(crate) fn clamp_after(g: &Graph, n: NodeId, rest: &[NodeId]) -> Option<(f32, f32)> {
    let out = *g.node(n).outputs.first()?;
    match rest {
        [] => Some((f32::NEG_INFINITY, f32::INFINITY)),
        [a] => match (&g.node(*a).op, g.node(*a).inputs.as_slice()) {
            (Op::Unary(dnnc_ir::op::Unary::Relu), &[v]) if v == out => Some((0.0, f32::INFINITY)),
            (Op::Unary(dnnc_ir::op::Unary::Clip { min, max }), &[v]) if v == out && min <= max => {
                Some((*min, *max))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The epilogue of an expansion ([`absorb_expansions`]) past its bias:
/// a channel-blocked pointwise conv, then at most one Relu or Clip
/// (constant bounds) of its result, or a Sigmoid of it, or a Sigmoid and
/// the Mul of the conv's result by it (SiLU, EfficientNet's expansions).
/// `(lo, hi, act)` (a `dnnc_runtime::cpu::pgemm::ACT_*`); `None` when
/// `nodes` is not that.
pub(crate) fn expansion_ep(g: &Graph, nodes: &[NodeId]) -> Option<(f32, f32, u32)> {
    use dnnc_ir::op::{Binary, Unary};
    use dnnc_runtime::cpu::pgemm::{ACT_NONE, ACT_SIGMOID, ACT_SILU};
    let (&conv, rest) = nodes.split_first()?;
    if !blocked_pointwise(g, conv) {
        return None;
    }
    let out = *g.node(conv).outputs.first()?;
    let sigmoid_of = |n: NodeId| {
        let node = g.node(n);
        matches!(node.op, Op::Unary(Unary::Sigmoid)) && node.inputs == [out]
    };
    let all = (f32::NEG_INFINITY, f32::INFINITY);
    match rest {
        [s] if sigmoid_of(*s) => Some((all.0, all.1, ACT_SIGMOID)),
        [s, m] if sigmoid_of(*s) => {
            let gate = *g.node(*s).outputs.first()?;
            let node = g.node(*m);
            let silu = matches!(node.op, Op::Binary(Binary::Mul))
                && (node.inputs == [out, gate] || node.inputs == [gate, out]);
            silu.then_some((all.0, all.1, ACT_SILU))
        }
        _ => clamp_after(g, conv, rest).map(|(lo, hi)| (lo, hi, ACT_NONE)),
    }
}

/// A projection's epilogue ([`absorb_projections`]): a channel-blocked
/// pointwise conv, then at most an Add of a same-typed value computed
/// outside `nodes` (the residual), then at most one Relu or Clip, each
/// reading the previous result. `(residual, lo, hi)`.
pub(crate) fn projection_ep(g: &Graph, nodes: &[NodeId]) -> Option<(Option<ValueId>, f32, f32)> {
    let (&conv, rest) = nodes.split_first()?;
    if !blocked_pointwise(g, conv) {
        return None;
    }
    let out = g.node(conv).outputs[0];
    if let Some((&add, tail)) = rest.split_first() {
        let node = g.node(add);
        if let (Op::Binary(dnnc_ir::op::Binary::Add), &[a, b]) = (&node.op, node.inputs.as_slice())
        {
            let r = match (a == out, b == out) {
                (true, false) => b,
                (false, true) => a,
                _ => return None,
            };
            let inside = nodes.contains(&g.value(r).producer);
            if inside || g.value(r).ty != g.value(out).ty || node.outputs.len() != 1 {
                return None;
            }
            let (lo, hi) = clamp_after(g, add, tail)?;
            return Some((Some(r), lo, hi));
        }
    }
    let (lo, hi) = clamp_after(g, conv, rest)?;
    Some((None, lo, hi))
}

/// Moves each channel-blocked pointwise conv kernel (an
/// [`expansion_ep`]) whose result only a blocked depthwise or grouped
/// window conv reads into that conv's kernel as its expansion, where
/// `takes(k)` says the conv's lowering computes one. The kernel then
/// computes the expanded rows its output rows need into a ring of rows
/// that stays in cache: MobileNet-V2's expansions to 96-192 channels on
/// 112x112 and 56x56 maps wrote 2.4-4.8 MB each, which the depthwise
/// conv read back. `worth(k, p)` says whether pointwise kernel `p` pays
/// to be computed so inside `k`.
pub(crate) fn absorb_expansions(
    g: &Graph,
    kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel) -> bool,
    worth: impl Fn(&Kernel, &Kernel) -> bool,
) -> Vec<Kernel> {
    absorb(g, kernels, takes, Slot::Expansion, |k, p| {
        p.kind == KernelKind::Contraction && expansion_ep(g, &p.nodes).is_some() && worth(k, p)
    })
}

/// Moves each channel-blocked pointwise conv kernel (a
/// [`projection_ep`]) whose data input only a blocked depthwise conv
/// kernel `d` computes, with `takes(d)`, into `d` as its projection: the
/// merged kernel computes a row of the depthwise conv for every channel
/// block into a scratch row, then projects it into the pointwise conv's
/// output, so the depthwise result (1.2-1.8 MB on MobileNet-V2's
/// 112x112 and 56x56 maps) is never written. It takes the pointwise
/// kernel's name, outputs and place.
pub(crate) fn absorb_projections(
    g: &Graph,
    kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel) -> bool,
) -> Vec<Kernel> {
    let fits = |p: &Kernel| {
        p.kind == KernelKind::Contraction
            && p.prologue.is_empty()
            && p.expansion.is_empty()
            && p.projection.is_empty()
            && projection_ep(g, &p.nodes).is_some()
    };
    let into = |d: &Kernel, _: &Kernel| d.projection.is_empty() && takes(d);
    absorb_reader(g, kernels, fits, into, Reader::Projection)
}

/// Moves each kernel that is one MaxPool node, whose data input only a
/// conv kernel `d` computes, with `takes(d, pool)`, into `d` as its pool:
/// the merged kernel computes the conv a band of rows at a time into a
/// scratch that stays in cache and pools each band from there, so the
/// conv's result (3.2 MB for SqueezeNet's stem, 3.2 MB for ResNet-18's)
/// is never written to memory and read back. It takes the pool kernel's
/// name, outputs and place.
pub(crate) fn absorb_pools(
    g: &Graph,
    kernels: Vec<Kernel>,
    takes: impl Fn(&Kernel, NodeId) -> bool,
) -> Vec<Kernel> {
    let fits = |p: &Kernel| {
        p.kind == KernelKind::Reduction
            && matches!(p.nodes.as_slice(), [n] if matches!(g.node(*n).op, Op::MaxPool(_))
                && g.node(*n).outputs.len() == 1)
    };
    let into = |d: &Kernel, p: &Kernel| {
        let plain = d.prologue.is_empty()
            && d.expansion.is_empty()
            && d.projection.is_empty()
            && d.pool.is_empty();
        plain && takes(d, p.nodes[0])
    };
    absorb_reader(g, kernels, fits, into, Reader::Pool)
}

/// Where [`absorb_reader`] puts the reading kernel's nodes.
#[derive(Clone, Copy)]
enum Reader {
    Projection,
    Pool,
}

/// Moves each kernel `p` with `fits(p)` whose data input only a
/// contraction kernel `d` computes, with `into(d, p)`, into `d` as its
/// projection or pool (`slot`): the merged kernel reads `d`'s and `p`'s
/// inputs and takes `p`'s name, outputs and place; `d`'s result gets no
/// buffer.
fn absorb_reader(
    g: &Graph,
    mut kernels: Vec<Kernel>,
    fits: impl Fn(&Kernel) -> bool,
    into: impl Fn(&Kernel, &Kernel) -> bool,
    slot: Reader,
) -> Vec<Kernel> {
    let graph_outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
    let mut gone = vec![false; kernels.len()];
    for pi in 0..kernels.len() {
        if !fits(&kernels[pi]) {
            continue;
        }
        let Some((di, v)) = sole_feeder(g, &kernels, pi, &graph_outputs) else {
            continue;
        };
        let (d, p) = (&kernels[di], &kernels[pi]);
        if gone[di] || d.kind != KernelKind::Contraction || !into(d, p) {
            continue;
        }
        let mut merged = d.clone();
        add_inputs(&mut merged.inputs, &p.inputs, v);
        merged.name = p.name.clone();
        merged.outputs = p.outputs.clone();
        match slot {
            Reader::Projection => merged.projection = p.nodes.clone(),
            Reader::Pool => merged.pool = p.nodes.clone(),
        }
        kernels[pi] = merged;
        gone[di] = true;
    }
    without(kernels, &gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inception-like module: the branch-2 3x3 conv written right after
    /// its 1x1 conv, as exporters emit it.
    const MODULE: &str = "graph m {
  input %x: f32[1,8,6,6]
  param %w1: f32[4,8,1,1] = he(seed=1)
  param %w2: f32[4,8,1,1] = he(seed=2)
  param %w3: f32[4,4,3,3] = he(seed=3)
  param %w4: f32[4,8,1,1] = he(seed=4)
  param %w5: f32[4,8,1,1] = he(seed=5)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%x, %w2)
  %b2 = Conv2d(%b, %w3) {pads=[1,1,1,1]}
  %c = Conv2d(%x, %w4)
  %p = MaxPool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
  %d = Conv2d(%p, %w5)
  %y = Concat(%a, %b2, %c, %d) {axis=1}
  output %y
}";

    fn names(g: &Graph, ks: &[Kernel]) -> Vec<String> {
        ks.iter()
            .map(|k| g.value(k.outputs[0]).name.clone())
            .collect()
    }

    #[test]
    fn readers_of_one_activation_run_back_to_back() {
        let g = dnnc_ir::text::parse(MODULE, "m.dnn").unwrap();
        let before = names(&g, &kernels(&g));
        assert_eq!(before, ["a", "b", "b2", "c", "p", "d", "y"]);
        let after = names(&g, &order_for_locality(&g, kernels(&g)));
        // The four readers of %x first; then the reader of the newest
        // activation (the pool's), then the 3x3 conv; the concat last.
        assert_eq!(after, ["a", "b", "c", "p", "d", "b2", "y"]);
    }

    #[test]
    fn a_chain_keeps_its_order() {
        let src = "graph c {
  input %x: f32[1,4,5,5]
  %a = Relu(%x)
  %b = MaxPool(%a) {kernel=[2,2], strides=[2,2]}
  %c = Sigmoid(%b)
  %d = GlobalAveragePool(%c)
  output %d
}";
        let g = dnnc_ir::text::parse(src, "c.dnn").unwrap();
        let before = names(&g, &kernels(&g));
        assert_eq!(names(&g, &order_for_locality(&g, kernels(&g))), before);
    }

    /// A blocked inverted residual block: expansion + Clip, depthwise +
    /// Clip, projection + residual; `extra` adds statements (an extra
    /// reader or output).
    fn block(extra: &str) -> Graph {
        let src = format!(
            "graph b {{
  input %x: f32[1,2,4,4,8]
  param %w1: f32[32,16,1,1] = he(seed=1)
  param %w2: f32[32,1,3,3] = he(seed=2)
  param %w3: f32[16,32,1,1] = he(seed=3)
  %e = Conv2d(%x, %w1) {{data=nchw8c}}
  %e6 = Clip(%e) {{min=0, max=6}}
  %d = Conv2d(%e6, %w2) {{pads=[1,1,1,1], group=32, data=nchw8c}}
  %d6 = Clip(%d) {{min=0, max=6}}
  %q = Conv2d(%d6, %w3) {{data=nchw8c}}
  %y = Add(%q, %x)
{extra}  output %y
}}"
        );
        dnnc_ir::text::parse(&src, "b.dnn").unwrap()
    }

    /// What the fused kernels hold: `(expansion, own nodes, projection)`
    /// lengths per kernel, with every block fusable.
    fn fused(g: &Graph) -> Vec<(usize, usize, usize)> {
        let ks = absorb_expansions(g, kernels(g), |_| true, |_, _| true);
        let ks = absorb_projections(g, ks, |k| !k.expansion.is_empty());
        ks.iter()
            .map(|k| (k.expansion.len(), k.nodes.len(), k.projection.len()))
            .collect()
    }

    #[test]
    fn a_whole_block_becomes_one_kernel() {
        let g = block("");
        assert_eq!(fused(&g), [(2, 2, 2)]);
    }

    /// An expansion or depthwise result that something else reads (or
    /// that is a graph output) must be written: its kernel stays apart.
    #[test]
    fn results_read_elsewhere_stay_in_their_own_kernels() {
        // (Without its expansion the depthwise kernel takes no projection.)
        let g = block("  output %e6\n");
        assert_eq!(fused(&g), [(0, 2, 0), (0, 2, 0), (0, 2, 0)]);
        let g = block("  %r = Relu(%d6)\n  output %r\n");
        let f = fused(&g);
        assert!(f.contains(&(2, 2, 0)), "{f:?}");
        assert!(f.iter().all(|&(_, _, p)| p == 0), "{f:?}");
    }
}
