//! Per-e-class facts: the result types, whether the class can be computed
//! from weights alone (and so folded when the model is compiled), and the
//! value of a tensor whose elements are all equal.

use super::lang::TensorNode;
use dnnc_ir::{Op, TensorType};
use egg::{DidMerge, EGraph, Id};
use std::collections::HashMap;

/// A graph source as the analysis sees it.
#[derive(Clone, Debug)]
pub struct SourceInfo {
    /// Its type.
    pub ty: TensorType,
    /// A parameter or constant (known when the model is compiled), not a
    /// graph input.
    pub weight: bool,
    /// The value of every element, when they are all equal and known.
    pub splat: Option<f32>,
}

/// The analysis: types, weights-only constness and splat values; it also
/// carries the machine profile extraction prices e-nodes with.
#[derive(Debug, Default)]
pub struct TensorAnalysis {
    /// Every source of the graph, by value name.
    pub sources: HashMap<String, SourceInfo>,
    /// The machine the cost model predicts run time on.
    pub profile: std::sync::Arc<crate::cost::MachineProfile>,
}

/// What the analysis knows of one e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    /// The result types: one for a tensor, several for a multi-result op;
    /// empty when the class's e-node is not well typed (extraction never
    /// picks such a node).
    pub types: Vec<TensorType>,
    /// Computable from parameters and constants alone.
    pub weights_only: bool,
    /// Every element equals this value.
    pub splat: Option<f32>,
}

impl Meta {
    /// The single tensor type, if the class is one well-typed tensor.
    pub fn ty(&self) -> Option<&TensorType> {
        match &self.types[..] {
            [t] => Some(t),
            _ => None,
        }
    }
}

/// The e-graph dnnc optimises.
pub type TensorGraph = EGraph<TensorNode, TensorAnalysis>;

impl egg::Analysis<TensorNode> for TensorAnalysis {
    type Data = Meta;

    fn make(egraph: &mut TensorGraph, enode: &TensorNode, _id: Id) -> Meta {
        match enode {
            TensorNode::Source(name) => match egraph.analysis.sources.get(name) {
                Some(s) => Meta {
                    types: vec![s.ty.clone()],
                    weights_only: s.weight,
                    splat: s.splat,
                },
                None => Meta {
                    types: vec![],
                    weights_only: false,
                    splat: None,
                },
            },
            TensorNode::Get(i, [t]) => {
                let m = &egraph[*t].data;
                Meta {
                    types: m.types.get(*i).cloned().into_iter().collect(),
                    weights_only: m.weights_only,
                    splat: None,
                }
            }
            TensorNode::Op(key, args) => {
                let ins: Vec<Option<&TensorType>> =
                    args.iter().map(|a| egraph[*a].data.ty()).collect();
                let types = match (key.op(), ins.iter().all(Option::is_some)) {
                    (Some(op), true) => {
                        let ins: Vec<&TensorType> = ins.into_iter().flatten().collect();
                        dnnc_ir::infer::infer(op, &ins).unwrap_or_default()
                    }
                    _ => vec![],
                };
                let weights_only = args.iter().all(|a| egraph[*a].data.weights_only)
                    && !matches!(key.op(), Some(Op::Input) | None);
                Meta {
                    types,
                    weights_only,
                    splat: None,
                }
            }
        }
    }

    fn merge(&mut self, a: &mut Meta, b: Meta) -> DidMerge {
        // Equal classes have equal types; a class that gained a typed
        // node keeps its types.
        let mut changed_a = false;
        if a.types.is_empty() && !b.types.is_empty() {
            a.types = b.types.clone();
            changed_a = true;
        }
        if !a.weights_only && b.weights_only {
            a.weights_only = true;
            changed_a = true;
        }
        if a.splat.is_none() && b.splat.is_some() {
            a.splat = b.splat;
            changed_a = true;
        }
        let changed_b =
            a.types != b.types || a.weights_only != b.weights_only || a.splat != b.splat;
        DidMerge(changed_a, changed_b)
    }
}
