//! What extraction minimises: each e-node's predicted run time in seconds
//! on the machine of a [`MachineProfile`], fusion-aware in the simplest
//! way:
//!
//! - a view, a Split or Concat whose pieces are contiguous slices (the CPU
//!   backend makes them views), and a node computed from weights alone
//!   (computed once, when the model is compiled) cost nothing;
//! - an elementwise op costs its arithmetic only: the fusion pass folds it
//!   into its producer's kernel, so its result makes no round trip
//!   through memory;
//! - a convolution costs what the profile predicts for the algorithm it
//!   will run (its `algo` attribute, or the heuristic's choice when it has
//!   none): `fixed + max(W / rate, bytes / bandwidth)`, and
//!   [`super::algos::OVERRIDE_MARGIN`] more for an algorithm other than the heuristic's
//!   (see [`super::algos`]);
//! - a MatMul or Gemm is priced as a pointwise convolution (the same
//!   packed GEMM);
//! - any other kernel costs the profile's per-kernel overhead plus its
//!   work at its class's loop rate (`MachineProfile::loop_rate`) or its
//!   bytes at the profile's bandwidth,
//!   whichever is slower.
//!
//! The per-kernel fixed costs are what make merging kernels pay: two
//! convs of one input merged into one save a kernel's overhead and the
//! second pass over the input.

use super::algos::layout_price;
use super::analysis::TensorGraph;
use super::lang::TensorNode;
use crate::conv_algo::ConvGeom;
use crate::cost::MachineProfile;
use crate::wd::conv::ConvShape;
use dnnc_ir::op::ConvAlgo;
use dnnc_ir::{Op, OpClass, TensorType};
use egg::{CostFunction, Id, Language};

/// Work units per second of elementwise arithmetic fused into a kernel's
/// epilogue: f32x4 vectors on a value already in registers.
pub const FUSED_RATE: f64 = 1.6e10;

/// A small charge (seconds) every op carries on top of its estimate, so a
/// free op (a view, a weights-only node) never ties with its operand and
/// extraction never goes round a cycle of free ops.
pub const OP_CHARGE: f64 = 1e-12;

/// Whether a Split or Concat along `axis` of `shape` has contiguous
/// pieces: only size-1 axes before the axis.
fn contiguous_pieces(op: &Op, shape: &[usize]) -> bool {
    match op {
        Op::Split { axis, .. } | Op::Concat { axis } => {
            dnnc_ir::infer::contiguous_pieces(shape, *axis)
        }
        _ => false,
    }
}

/// The predicted seconds of one op from its operand and result types;
/// `const_w` tells whether a conv's filter is known at compile time.
fn price(
    profile: &MachineProfile,
    op: &Op,
    ins: &[&TensorType],
    outs: &[&TensorType],
    const_w: bool,
) -> f64 {
    let work = crate::wd::rules::node_cost(op, ins, outs).work as f64;
    let written: f64 = outs.iter().map(|t| t.size_bytes() as f64).sum();
    let read: f64 = ins.iter().map(|t| t.size_bytes() as f64).sum();
    match op {
        Op::Conv2d(p) => {
            if let (Some(x), Some(w), Some(y)) = (ins.first(), ins.get(1), outs.first()) {
                if let Ok(geo) = ConvGeom::from_shapes(p, &x.shape, &w.shape, &y.shape, const_w) {
                    let heuristic = geo.default_algo();
                    let algo = match p.algo {
                        a if a != ConvAlgo::Auto && geo.unfit(a).is_none() => a,
                        _ => heuristic,
                    };
                    let shape = ConvShape::from_types(p, x, w, y);
                    let names = (algo.name(), heuristic.name());
                    if let Some(t) = layout_price(profile, &shape, names, p.layout) {
                        return t;
                    }
                }
            }
        }
        Op::MatMul | Op::Gemm(_) => {
            let rate = profile
                .rates
                .get("pointwise")
                .copied()
                .unwrap_or(crate::cost::LOOP_RATE);
            let fixed = profile
                .fixed
                .get("pointwise")
                .copied()
                .unwrap_or(profile.overhead);
            // A and B, not the bias: a fused bias reads what the Add it
            // replaces did.
            let ab: f64 = ins.iter().take(2).map(|t| t.size_bytes() as f64).sum();
            return fixed + (work / rate).max((ab + written) / profile.bandwidth);
        }
        Op::Split { .. } | Op::Concat { .. } => {
            let whole = if matches!(op, Op::Split { .. }) {
                ins.first()
            } else {
                outs.first()
            };
            if whole.is_some_and(|t| contiguous_pieces(op, &t.shape)) {
                return 0.0;
            }
        }
        _ => {}
    }
    match op.class() {
        OpClass::Source | OpClass::View => 0.0,
        OpClass::Elementwise => work / FUSED_RATE,
        class => {
            profile.overhead
                + (work / profile.loop_rate(class)).max((read + written) / profile.bandwidth)
        }
    }
}

/// The run-time cost of one e-node alone (its operands excluded), or
/// `None` when the node is not well typed.
pub fn node_cost(egraph: &TensorGraph, node: &TensorNode) -> Option<f64> {
    let TensorNode::Op(_, args) = node else {
        return Some(0.0);
    };
    let op = node.ir_op()?;
    let ins: Vec<&TensorType> = args
        .iter()
        .map(|a| egraph[*a].data.ty())
        .collect::<Option<_>>()?;
    // Operands all weights, or none (a constant generator): computed
    // when the model is compiled.
    if args.iter().all(|a| egraph[*a].data.weights_only) {
        return Some(0.0);
    }
    let outs = dnnc_ir::infer::infer(op, &ins).ok()?;
    let out_refs: Vec<&TensorType> = outs.iter().collect();
    let const_w = args.get(1).is_some_and(|w| egraph[*w].data.weights_only);
    Some(price(
        &egraph.analysis.profile,
        op,
        &ins,
        &out_refs,
        const_w,
    ))
}

/// What extraction charges an e-node alone: [`node_cost`] plus
/// [`OP_CHARGE`] for an op, nothing for a source or projection; `None`
/// when the node is not well typed.
pub fn charge(egraph: &TensorGraph, node: &TensorNode) -> Option<f64> {
    match node {
        TensorNode::Op(..) => node_cost(egraph, node).map(|c| c + OP_CHARGE),
        _ => Some(0.0),
    }
}

/// Tree cost for egg's greedy extractor: a node's cost plus its
/// operands' (a subexpression used twice counts twice).
pub struct RunTime<'a> {
    /// The e-graph, for operand types.
    pub egraph: &'a TensorGraph,
}

impl CostFunction<TensorNode> for RunTime<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorNode, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        let own = charge(self.egraph, enode).unwrap_or(f64::INFINITY);
        enode.children().iter().fold(own, |acc, &c| acc + costs(c))
    }
}

/// The predicted seconds of a whole graph on `profile`'s machine: every
/// node once, by the same rule as [`node_cost`] (a node whose operands
/// are all parameters or constants, directly or through such nodes, or
/// that has none, costs nothing).
pub fn graph_cost(g: &dnnc_ir::Graph, profile: &MachineProfile) -> f64 {
    let mut weights_only = vec![false; g.value_count()];
    let mut total = 0.0;
    for id in g.topo_order() {
        let node = g.node(id);
        let wo = match &node.op {
            Op::Input => false,
            Op::Param(_) | Op::Constant => true,
            _ => node.inputs.iter().all(|v| weights_only[v.index()]),
        };
        for &v in &node.outputs {
            weights_only[v.index()] = wo;
        }
        if wo || node.op.class() == OpClass::Source {
            continue;
        }
        let ins: Vec<&TensorType> = node.inputs.iter().map(|&v| &g.value(v).ty).collect();
        let outs: Vec<&TensorType> = node.outputs.iter().map(|&v| &g.value(v).ty).collect();
        let const_w = node.inputs.get(1).is_some_and(|v| weights_only[v.index()]);
        total += OP_CHARGE + price(profile, &node.op, &ins, &outs, const_w);
    }
    total
}
