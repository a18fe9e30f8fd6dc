//! Work-Depth (W-D) analysis: the basis of dnnc's cost model.
//!
//! Every node gets a work `W` (operations; one multiply-accumulate counts
//! one) and a depth `D` (longest dependency chain inside it) from the rules
//! in [`rules`]; the graph's work is the sum and its depth the longest path
//! through the DAG weighted by node depth. Conv2d nodes additionally carry
//! the figures of every algorithm in [`conv`]. Brent's theorem turns the
//! totals into bounds on the run time on `p` processors.
//!
//! The rules, their derivations and the corrections to the survey they come
//! from are in `docs/cost-model.md`.
//!
//! ```
//! use dnnc_ir::{Graph, Init, Op, TensorType};
//! let mut g = Graph::new("fc");
//! let x = g.add_input("x", TensorType::f32(vec![1, 400])).unwrap();
//! let w = g.add_param("w", TensorType::f32(vec![400, 120]), Init::Zeros).unwrap();
//! let y = g.add(Op::MatMul, &[x, w], "y").unwrap();
//! g.set_outputs(vec![y]);
//! let a = dnnc_passes::wd::analyze(&g);
//! assert_eq!((a.work, a.depth), (48_000, 9));
//! ```

pub mod conv;
mod memory;
mod render;
pub mod rules;

pub use conv::{AlgoCost, ConvAlgos, ConvShape, FFT_C};
pub use memory::{activation_memory, format_bytes, ActivationMemory, ACTIVATION_ALIGN};
pub use render::{format_thousands, render_json, render_table};
pub use rules::{ceil_log2, node_cost, Cost};

use dnnc_ir::{Graph, Op, OpClass, TensorType};
use serde::{Serialize, Serializer};
use std::collections::HashMap;

/// Lower-case name of an op class, as printed and serialised.
pub fn class_name(c: OpClass) -> &'static str {
    match c {
        OpClass::Source => "source",
        OpClass::Contraction => "contraction",
        OpClass::Reduction => "reduction",
        OpClass::Elementwise => "elementwise",
        OpClass::DataMovement => "data-movement",
        OpClass::View => "view",
    }
}

fn ser_class<S: Serializer>(c: &OpClass, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(class_name(*c))
}

/// The W-D figures of one computational node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeCost {
    /// Node name (its first result's name).
    pub name: String,
    /// Op name as in the text format (`Conv2d`, `Relu`, ...).
    pub op: String,
    /// Coarse op class, which selects the rule used.
    #[serde(serialize_with = "ser_class")]
    pub class: OpClass,
    /// Shape of the first result.
    pub shape: Vec<usize>,
    /// Work `W` of the node (for Conv2d: the direct algorithm).
    pub work: u64,
    /// Depth `D` of the node.
    pub depth: u64,
    /// Whether the node lies on the reported critical path.
    pub critical: bool,
    /// For Conv2d: every algorithm's figures.
    pub conv: Option<ConvAlgos>,
}

impl NodeCost {
    /// The node's work and depth as a [`Cost`].
    pub fn cost(&self) -> Cost {
        Cost::new(self.work, self.depth)
    }

    /// Average parallelism `W / max(D, 1)` of the node alone.
    pub fn parallelism(&self) -> f64 {
        self.cost().parallelism()
    }
}

/// The W-D analysis of a whole graph. `nodes` lists the computational nodes
/// (sources compute nothing and are left out) in topological order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Analysis {
    /// Graph name.
    pub graph: String,
    /// Per-node figures, topological order, sources omitted.
    pub nodes: Vec<NodeCost>,
    /// Total work: the sum over nodes.
    pub work: u64,
    /// Total depth: the heaviest path through the DAG, weighted by node depth.
    pub depth: u64,
    /// The hidden FFT constant the conv figures were computed with.
    pub fft_c: f64,
    /// Peak activation memory, when computed ([`activation_memory`]);
    /// rendered as a totals line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<ActivationMemory>,
}

impl Analysis {
    /// Average parallelism `W / D` (a depth of 0 counts as one step), the
    /// survey's suggested number of processors.
    pub fn parallelism(&self) -> f64 {
        Cost::new(self.work, self.depth).parallelism()
    }

    /// Brent's bounds on the time with `p` processors (unit-time operations):
    /// `max(W/p, D) <= T_p <= W/p + D`. `p = 0` is treated as 1.
    pub fn brent(&self, p: usize) -> (f64, f64) {
        let wp = self.work as f64 / p.max(1) as f64;
        let d = self.depth as f64;
        (wp.max(d), wp + d)
    }

    /// Work of the contractions (Conv2d, Gemm, MatMul): the "conv + FC" MAC
    /// count usually quoted for a network.
    pub fn contraction_work(&self) -> u64 {
        self.work_of(OpClass::Contraction)
    }

    /// Work summed over the nodes of one class.
    pub fn work_of(&self, class: OpClass) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.class == class)
            .map(|n| n.work)
            .fold(0, u64::saturating_add)
    }

    /// A node's figures by name.
    pub fn node(&self, name: &str) -> Option<&NodeCost> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Names of the nodes on the reported critical path, in order.
    pub fn critical_path(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|n| n.critical)
            .map(|n| n.name.as_str())
            .collect()
    }
}

/// Analyses a graph from its types alone (weights are never touched):
/// per-node figures, total work, critical-path depth. Linear in the graph
/// size apart from the topological sort.
pub fn analyze(g: &Graph) -> Analysis {
    let order = g.topo_order();
    let pos: HashMap<_, _> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    // dist[i]: heaviest depth of a path ending at order[i] (inclusive);
    // pred[i]: the predecessor that achieves it (first in topo order on ties).
    let mut dist = vec![0u64; order.len()];
    let mut pred: Vec<Option<usize>> = vec![None; order.len()];
    let mut costs = Vec::with_capacity(order.len());
    let mut work = 0u64;
    for (i, &id) in order.iter().enumerate() {
        let node = g.node(id);
        let ins: Vec<&TensorType> = node.inputs.iter().map(|&v| &g.value(v).ty).collect();
        let outs: Vec<&TensorType> = node.outputs.iter().map(|&v| &g.value(v).ty).collect();
        let cost = node_cost(&node.op, &ins, &outs);
        work = work.saturating_add(cost.work);
        let mut best: Option<(u64, usize)> = None;
        for &v in &node.inputs {
            let p = pos[&g.value(v).producer];
            if best.is_none_or(|(d, q)| dist[p] > d || (dist[p] == d && p < q)) {
                best = Some((dist[p], p));
            }
        }
        dist[i] = best.map_or(0, |(d, _)| d).saturating_add(cost.depth);
        pred[i] = best.map(|(_, p)| p);
        costs.push(cost);
    }

    let mut critical = vec![false; order.len()];
    let end = (0..order.len()).fold(None, |acc: Option<usize>, i| match acc {
        Some(j) if dist[j] >= dist[i] => Some(j),
        _ => Some(i),
    });
    let depth = end.map_or(0, |i| dist[i]);
    let mut cur = end;
    while let Some(i) = cur {
        critical[i] = true;
        cur = pred[i];
    }

    let nodes = order
        .iter()
        .enumerate()
        .filter(|(_, &id)| g.node(id).op.class() != OpClass::Source)
        .map(|(i, &id)| {
            let node = g.node(id);
            let out = &g.value(node.outputs[0]).ty;
            let conv = match &node.op {
                Op::Conv2d(c) => Some(
                    ConvShape::from_types(
                        c,
                        &g.value(node.inputs[0]).ty,
                        &g.value(node.inputs[1]).ty,
                        out,
                    )
                    .algos(),
                ),
                _ => None,
            };
            NodeCost {
                name: g.node_name(id).to_string(),
                op: node.op.name().to_string(),
                class: node.op.class(),
                shape: out.shape.clone(),
                work: costs[i].work,
                depth: costs[i].depth,
                critical: critical[i],
                conv,
            }
        })
        .collect();

    Analysis {
        graph: g.name.clone(),
        nodes,
        work,
        depth,
        fft_c: FFT_C,
        memory: None,
    }
}
