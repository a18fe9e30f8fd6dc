//! Whole-graph verifier. Builders keep graphs valid, but passes mutate them;
//! running the verifier after each pass catches a broken invariant at the
//! pass that broke it.

use crate::graph::{Graph, NodeId};
use crate::infer::infer;
use crate::op::Op;

use petgraph::Direction;
use std::collections::HashSet;

/// One violated invariant, naming the node.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("verifier: {node}: {message}")]
pub struct VerifyError {
    /// Node name (its first result) or `graph`.
    pub node: String,
    /// What is wrong.
    pub message: String,
}

/// Checks structure (acyclic, every use defined, edge/operand agreement,
/// arity, unique names, outputs defined) and types (every value's type is
/// the inferred one; constants match their data). Returns every violation.
pub fn verify(g: &Graph) -> Result<(), Vec<VerifyError>> {
    let mut errs = vec![];
    let dag = g.dag();
    let err = |errs: &mut Vec<VerifyError>, node: &str, m: String| {
        errs.push(VerifyError {
            node: node.to_string(),
            message: m,
        })
    };
    if petgraph::algo::is_cyclic_directed(dag) {
        err(&mut errs, "graph", "the graph has a cycle".into());
        return Err(errs);
    }
    let mut names = HashSet::new();
    let live: Vec<NodeId> = g.topo_order();
    for &n in &live {
        let node = g.node(n);
        let name = g.node_name(n).to_string();
        for &v in &node.outputs {
            let val = g.value(v);
            if val.producer != n {
                err(
                    &mut errs,
                    &name,
                    format!("value %{} has the wrong producer", val.name),
                );
            }
            if !names.insert(val.name.clone()) {
                err(
                    &mut errs,
                    &name,
                    format!("value %{} is defined twice", val.name),
                );
            }
            if g.value_by_name(&val.name) != Some(v) {
                err(
                    &mut errs,
                    &name,
                    format!("value %{} is missing from the name table", val.name),
                );
            }
        }
        if node.outputs.len() != node.op.num_outputs() {
            err(
                &mut errs,
                &name,
                format!(
                    "{} results, op has {}",
                    node.outputs.len(),
                    node.op.num_outputs()
                ),
            );
        }
        let (lo, hi) = node.op.arity();
        if node.inputs.len() < lo || node.inputs.len() > hi {
            err(
                &mut errs,
                &name,
                format!("{} has {} inputs", node.op.name(), node.inputs.len()),
            );
        }
        let mut edges: Vec<(usize, u32)> = dag
            .edges_directed(n, Direction::Incoming)
            .map(|e| (e.weight().operand, e.weight().value.0))
            .collect();
        edges.sort();
        let expected: Vec<(usize, u32)> = node
            .inputs
            .iter()
            .enumerate()
            .map(|(i, v)| (i, v.0))
            .collect();
        if edges != expected {
            err(
                &mut errs,
                &name,
                "operand list and incoming edges disagree".into(),
            );
            continue;
        }
        for &v in &node.inputs {
            if !dag.contains_node(g.value(v).producer) {
                err(
                    &mut errs,
                    &name,
                    format!("uses undefined value %{}", g.value(v).name),
                );
            }
        }
        match &node.op {
            Op::Input | Op::Param(_) => {}
            Op::Constant => {
                let val = g.value(node.outputs[0]);
                match g.weights.get(&val.name) {
                    None => err(&mut errs, &name, "constant has no data".into()),
                    Some(t) if t.ty() != val.ty => err(
                        &mut errs,
                        &name,
                        format!("constant is declared {} but holds {}", val.ty, t.ty()),
                    ),
                    _ => {}
                }
            }
            op => {
                let tys: Vec<_> = node.inputs.iter().map(|&v| &g.value(v).ty).collect();
                match infer(op, &tys) {
                    Err(m) => err(&mut errs, &name, format!("{}: {m}", op.name())),
                    Ok(out) => {
                        for (t, &v) in out.iter().zip(&node.outputs) {
                            if *t != g.value(v).ty {
                                err(
                                    &mut errs,
                                    &name,
                                    format!(
                                        "%{} is typed {} but {} infers {t}",
                                        g.value(v).name,
                                        g.value(v).ty,
                                        op.name()
                                    ),
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    for &o in g.outputs() {
        if o.index() >= g.value_count() || !dag.contains_node(g.value(o).producer) {
            err(
                &mut errs,
                "graph",
                format!("output #{} is not defined", o.0),
            );
        }
    }
    if g.outputs().is_empty() {
        err(&mut errs, "graph", "the graph has no outputs".into());
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}
