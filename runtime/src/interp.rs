//! The reference interpreter: runs a [`Graph`] node by node on concrete
//! tensors with ONNX semantics.
//!
//! It is the oracle every backend and every graph rewrite is checked
//! against, so it checks everything it can: graph inputs against their
//! declared types, weight data against its parameter, and every result
//! against the type the graph declares for it. Intermediate tensors are
//! dropped after their last use, so peak memory stays near the largest live
//! set rather than the sum of all activations.

use crate::kernels;
use dnnc_ir::{Graph, GraphError, NodeId, Op, Tensor, TensorType, ValueId};
use std::borrow::Cow;
use std::collections::HashMap;

/// Why a graph could not be run. Every variant names the input, parameter,
/// node or output at fault.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A graph input was not supplied.
    #[error("missing graph input `{name}` (expected {expected})")]
    MissingInput {
        /// Input name.
        name: String,
        /// Its declared type.
        expected: TensorType,
    },
    /// A supplied tensor matches no graph input.
    #[error("`{name}` is not an input of graph `{graph}` (its inputs are: {known})")]
    UnknownInput {
        /// The name supplied.
        name: String,
        /// Graph name.
        graph: String,
        /// The graph's input names, comma separated.
        known: String,
    },
    /// The same input was supplied twice.
    #[error("graph input `{name}` was given more than once")]
    DuplicateInput {
        /// Input name.
        name: String,
    },
    /// A supplied tensor has the wrong dtype or shape.
    #[error("graph input `{name}` expects {expected}, but the tensor given is {found}")]
    InputType {
        /// Input name.
        name: String,
        /// Declared type.
        expected: TensorType,
        /// Type of the tensor supplied.
        found: TensorType,
    },
    /// A parameter or constant has no data (e.g. an unbound external weight).
    #[error("{source}")]
    Weight {
        /// Parameter or constant name.
        name: String,
        /// The graph's explanation (boxed: it is large and rare).
        source: Box<GraphError>,
    },
    /// Weight data does not match the declared type of its value.
    #[error("weight data of `%{name}` is {found}, but the graph declares {expected}")]
    WeightType {
        /// Parameter or constant name.
        name: String,
        /// Declared type.
        expected: TensorType,
        /// Type of the data.
        found: TensorType,
    },
    /// A node failed: bad operand data (e.g. a gather index out of range)
    /// or an inconsistency between the graph and its data.
    #[error("{op} `%{node}`: {message}")]
    Op {
        /// Node name (its first result).
        node: String,
        /// Op name.
        op: String,
        /// What went wrong.
        message: String,
    },
    /// A graph output was never produced (the graph is malformed).
    #[error(
        "graph output `%{name}` was never computed (is the graph cyclic, or the value removed?)"
    )]
    Output {
        /// Output value name.
        name: String,
    },
}

/// A node's name for messages: its first result's name, without panicking on
/// a malformed node that has none.
fn node_label(g: &Graph, id: NodeId) -> String {
    match g.node(id).outputs.first() {
        Some(&v) if v.index() < g.value_count() => g.value(v).name.clone(),
        _ => format!("#{}", id.index()),
    }
}

/// Runs `g` on `inputs` (matched to the graph's inputs by name) and returns
/// the graph outputs in order.
///
/// Every graph input must be supplied exactly once with exactly its declared
/// type. Nodes execute in [`Graph::topo_order`]; each intermediate tensor is
/// freed after its last use.
pub fn run(g: &Graph, inputs: &[(String, Tensor)]) -> Result<Vec<Tensor>, RunError> {
    let order = g.topo_order();
    let n_vals = g.value_count();
    let label = |v: ValueId| -> String {
        if v.index() < n_vals {
            g.value(v).name.clone()
        } else {
            format!("#{}", v.0)
        }
    };

    // Match supplied tensors to graph inputs.
    let graph_inputs = g.inputs();
    let mut provided: HashMap<&str, &Tensor> = HashMap::new();
    for (name, t) in inputs {
        if !graph_inputs.iter().any(|&v| g.value(v).name == *name) {
            let known: Vec<&str> = graph_inputs
                .iter()
                .map(|&v| g.value(v).name.as_str())
                .collect();
            return Err(RunError::UnknownInput {
                name: name.clone(),
                graph: g.name.clone(),
                known: known.join(", "),
            });
        }
        if provided.insert(name.as_str(), t).is_some() {
            return Err(RunError::DuplicateInput { name: name.clone() });
        }
    }

    // Remaining uses of each value; graph outputs hold one use each until
    // they are collected at the end.
    let mut uses = vec![0usize; n_vals];
    for &n in &order {
        for &v in &g.node(n).inputs {
            if v.index() >= n_vals {
                return Err(op_err(g, n, format!("operand {} is not a value", label(v))));
            }
            uses[v.index()] += 1;
        }
    }
    for &v in g.outputs() {
        if v.index() >= n_vals {
            return Err(RunError::Output { name: label(v) });
        }
        uses[v.index()] += 1;
    }

    let mut slots: Vec<Option<Cow<'_, Tensor>>> = (0..n_vals).map(|_| None).collect();
    for &n in &order {
        let node = g.node(n);
        match &node.op {
            Op::Input | Op::Param(_) | Op::Constant => {
                let Some(&v) = node.outputs.first() else {
                    return Err(op_err(g, n, "source node has no result".into()));
                };
                let val = g.value(v);
                let data: Cow<'_, Tensor> = if matches!(node.op, Op::Input) {
                    let t = provided.get(val.name.as_str()).copied().ok_or_else(|| {
                        RunError::MissingInput {
                            name: val.name.clone(),
                            expected: val.ty.clone(),
                        }
                    })?;
                    if t.ty() != val.ty {
                        return Err(RunError::InputType {
                            name: val.name.clone(),
                            expected: val.ty.clone(),
                            found: t.ty(),
                        });
                    }
                    Cow::Borrowed(t)
                } else {
                    let t = g.weight(v).map_err(|source| RunError::Weight {
                        name: val.name.clone(),
                        source: Box::new(source),
                    })?;
                    if t.ty() != val.ty {
                        return Err(RunError::WeightType {
                            name: val.name.clone(),
                            expected: val.ty.clone(),
                            found: t.ty(),
                        });
                    }
                    t
                };
                if uses[v.index()] > 0 {
                    slots[v.index()] = Some(data);
                }
            }
            op => {
                // Operands used for the last time (and only once by this
                // node) are moved out, so kernels may reuse their buffers.
                let mut taken: Vec<Option<Cow<'_, Tensor>>> = Vec::with_capacity(node.inputs.len());
                for &v in &node.inputs {
                    let here = node.inputs.iter().filter(|&&u| u == v).count();
                    taken.push(if here == 1 && uses[v.index()] == 1 {
                        Some(slots[v.index()].take().ok_or_else(|| {
                            op_err(g, n, format!("operand `%{}` was never computed", label(v)))
                        })?)
                    } else {
                        None
                    });
                }
                let mut args: Vec<Cow<'_, Tensor>> = Vec::with_capacity(node.inputs.len());
                for (&v, t) in node.inputs.iter().zip(taken) {
                    args.push(match t {
                        Some(t) => t,
                        None => Cow::Borrowed(slots[v.index()].as_deref().ok_or_else(|| {
                            op_err(g, n, format!("operand `%{}` was never computed", label(v)))
                        })?),
                    });
                }
                let results = kernels::exec(op, args).map_err(|m| op_err(g, n, m))?;
                for &v in &node.inputs {
                    let u = &mut uses[v.index()];
                    *u = u.saturating_sub(1);
                    if *u == 0 {
                        slots[v.index()] = None;
                    }
                }
                if results.len() != node.outputs.len() {
                    return Err(op_err(
                        g,
                        n,
                        format!(
                            "produced {} results, but the node has {}",
                            results.len(),
                            node.outputs.len()
                        ),
                    ));
                }
                for (t, &v) in results.into_iter().zip(&node.outputs) {
                    let declared = &g.value(v).ty;
                    if t.ty() != *declared {
                        return Err(op_err(
                            g,
                            n,
                            format!(
                                "result `%{}` is {}, but the graph declares {declared}",
                                label(v),
                                t.ty()
                            ),
                        ));
                    }
                    if uses[v.index()] > 0 {
                        slots[v.index()] = Some(Cow::Owned(t));
                    }
                }
            }
        }
    }

    let mut out = Vec::with_capacity(g.outputs().len());
    for &v in g.outputs() {
        let i = v.index();
        uses[i] = uses[i].saturating_sub(1);
        let t = if uses[i] == 0 {
            slots[i].take().map(Cow::into_owned)
        } else {
            slots[i].as_deref().cloned()
        };
        out.push(t.ok_or_else(|| RunError::Output { name: label(v) })?);
    }
    Ok(out)
}

fn op_err(g: &Graph, n: NodeId, message: String) -> RunError {
    RunError::Op {
        node: node_label(g, n),
        op: g.node(n).op.name().to_string(),
        message,
    }
}
