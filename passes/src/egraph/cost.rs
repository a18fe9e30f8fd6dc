//! What extraction minimises: an estimate of each e-node's run time from
//! its Work-Depth figures ([`crate::wd::rules::node_cost`]) and the bytes
//! it writes, fusion-aware in the simplest way: an elementwise op costs
//! its arithmetic only (the fusion pass folds it into its producer's
//! kernel, so its result makes no round trip through memory), a view
//! costs nothing, and a node computed from weights alone costs nothing
//! (it is computed once, when the model is compiled).

use super::analysis::TensorGraph;
use super::lang::TensorNode;
use dnnc_ir::{OpClass, TensorType};
use egg::{CostFunction, Id, Language};

/// Relative cost of writing one byte against one unit of work (an
/// operation): the machine streams ~4 bytes in the time of one
/// multiply-accumulate of a packed GEMM.
const BYTE_COST: f64 = 0.25;

/// A small charge every op carries on top of its estimate, so a free op
/// (a view, a weights-only node) never ties with its operand and
/// extraction never goes round a cycle of free ops.
pub const OP_CHARGE: f64 = 1e-3;

/// The estimate of one op from its operand and result types: its
/// Work-Depth work, plus [`BYTE_COST`] per byte written unless it is
/// elementwise (fused into its producer) or a view (free).
fn price(op: &dnnc_ir::Op, ins: &[&TensorType], outs: &[&TensorType]) -> f64 {
    let work = crate::wd::rules::node_cost(op, ins, outs).work as f64;
    let bytes: f64 = outs.iter().map(|t| t.size_bytes() as f64).sum();
    match op.class() {
        OpClass::Source | OpClass::View => 0.0,
        OpClass::Elementwise => work,
        _ => work + BYTE_COST * bytes,
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
    if args.iter().all(|a| egraph[*a].data.weights_only) && !args.is_empty() {
        return Some(0.0);
    }
    let outs = dnnc_ir::infer::infer(op, &ins).ok()?;
    let out_refs: Vec<&TensorType> = outs.iter().collect();
    Some(price(op, &ins, &out_refs))
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

/// The run-time estimate of a whole graph: every node once, by the same
/// rule as [`node_cost`] (a node whose operands are all parameters or
/// constants, directly or through such nodes, costs nothing).
pub fn graph_cost(g: &dnnc_ir::Graph) -> f64 {
    let mut weights_only = vec![false; g.value_count()];
    let mut total = 0.0;
    for id in g.topo_order() {
        let node = g.node(id);
        let wo = match &node.op {
            dnnc_ir::Op::Input => false,
            dnnc_ir::Op::Param(_) | dnnc_ir::Op::Constant => true,
            _ => !node.inputs.is_empty() && node.inputs.iter().all(|v| weights_only[v.index()]),
        };
        for &v in &node.outputs {
            weights_only[v.index()] = wo;
        }
        if wo || node.op.class() == OpClass::Source {
            continue;
        }
        let ins: Vec<&TensorType> = node.inputs.iter().map(|&v| &g.value(v).ty).collect();
        let outs: Vec<&TensorType> = node.outputs.iter().map(|&v| &g.value(v).ty).collect();
        total += OP_CHARGE + price(&node.op, &ins, &outs);
    }
    total
}
