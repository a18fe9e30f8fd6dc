//! Kernel grouping for the CPU backend, in the shape of
//! `dnnc_passes::fusion::KernelGraph`: a contraction (or an elementwise
//! node) absorbs the chain of elementwise nodes that consume its result
//! alone, so epilogues run on the output tile while it is in cache.
//! Everything else is one node per kernel.
//!
//! This is the stand-in until the fusion pass lands; the code generator
//! only relies on the documented invariants (topological kernels, anchor
//! first, intermediates used only inside their kernel).

use super::elementwise;
use dnnc_ir::{DType, Graph, NodeId, Op, OpClass, ValueId};
use std::collections::{HashMap, HashSet};

/// What kind of loop nest a kernel becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KernelKind {
    /// GEMM-based: Conv2d, Gemm, MatMul, plus an elementwise epilogue.
    Contraction,
    /// One loop nest over the output evaluating a chain of nodes.
    Elementwise,
    /// Pools, reductions, normalisations.
    Reduction,
    /// Strided copies.
    DataMovement,
    /// A buffer alias; no code.
    View,
}

/// One generated function's worth of nodes.
#[derive(Clone, Debug)]
pub(crate) struct Kernel {
    /// Name (the anchor's first result).
    pub name: String,
    /// Kind.
    pub kind: KernelKind,
    /// The node that determines the loop structure.
    pub anchor: Option<NodeId>,
    /// Nodes in topological order, anchor first.
    pub nodes: Vec<NodeId>,
    /// Values read from outside the kernel.
    pub inputs: Vec<ValueId>,
    /// Values used outside the kernel (or graph outputs).
    pub outputs: Vec<ValueId>,
}

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

/// Whether an elementwise node may join a kernel whose loop domain is
/// `domain`, consuming the kernel's current result `prev` as operand `k`.
fn joinable(g: &Graph, n: NodeId, prev: ValueId, domain: &[usize]) -> bool {
    let node = g.node(n);
    if !elementwise::supports(&node.op) || node.outputs.len() != 1 {
        return false;
    }
    let out = &g.value(node.outputs[0]).ty;
    if out.shape != domain || out.dtype != DType::F32 {
        return false;
    }
    // BatchNormalization's parameters broadcast along axis 1 only; the
    // chained value must be its data operand.
    if matches!(node.op, Op::BatchNormalization { .. }) && node.inputs[0] != prev {
        return false;
    }
    node.inputs
        .iter()
        .all(|&v| g.value(v).ty.dtype == DType::F32)
}

/// Groups the graph's computational nodes into kernels.
pub(crate) fn group(g: &Graph) -> Vec<Kernel> {
    let order = g.topo_order();
    let pos: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
    let mut taken: HashSet<NodeId> = HashSet::new();
    let mut kernels = Vec::new();
    for &n in &order {
        let node = g.node(n);
        if node.op.class() == OpClass::Source || taken.contains(&n) {
            continue;
        }
        taken.insert(n);
        let kind = kind_of(&node.op);
        let mut nodes = vec![n];
        let fusable_anchor = match kind {
            KernelKind::Contraction => {
                matches!(node.op, Op::Conv2d(_) | Op::Gemm(_) | Op::MatMul)
            }
            KernelKind::Elementwise => elementwise::supports(&node.op),
            _ => false,
        };
        if fusable_anchor && node.outputs.len() == 1 {
            let domain = g.value(node.outputs[0]).ty.shape.clone();
            let mut prev = node.outputs[0];
            loop {
                if outputs.contains(&prev) {
                    break;
                }
                let users = g.users(prev);
                let [(u, _)] = users.as_slice() else {
                    break;
                };
                let u = *u;
                if taken.contains(&u) || !joinable(g, u, prev, &domain) {
                    break;
                }
                // Every other operand must already exist when this kernel
                // runs (at the anchor's position).
                let ready = g.node(u).inputs.iter().all(|&v| {
                    v == prev || {
                        let p = g.value(v).producer;
                        nodes.contains(&p) || pos.get(&p).is_some_and(|&i| i < pos[&n])
                    }
                });
                if !ready || g.node(u).inputs.iter().filter(|&&v| v == prev).count() != 1 {
                    break;
                }
                taken.insert(u);
                nodes.push(u);
                prev = g.node(u).outputs[0];
            }
        }
        kernels.push(finish(g, &outputs, nodes, kind));
    }
    kernels
}

/// Fills in a kernel's inputs and outputs from its nodes.
pub(crate) fn finish(
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
            // A lone node writes every result, used or not.
            let external = nodes.len() == 1
                || graph_outputs.contains(&v)
                || g.users(v).iter().any(|(u, _)| !inside.contains(u));
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
    Kernel {
        name,
        kind,
        anchor: Some(anchor),
        nodes,
        inputs,
        outputs: outs,
    }
}
