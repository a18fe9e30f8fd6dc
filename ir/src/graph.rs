//! The dataflow graph: ops as petgraph nodes, tensor values as typed edges.
//!
//! Invariants, upheld by every mutating method and re-checked by
//! [`crate::verify()`]:
//! - every value is produced by exactly one node output and has a unique name;
//! - each node's `inputs` list matches its incoming edges (one per operand);
//! - the graph is acyclic, and every value's type is the inferred one;
//! - `param`/`const` data lives in [`WeightStore`], keyed by value name.

use crate::infer::infer;
use crate::init::Init;
use crate::op::Op;
use crate::tensor::{Tensor, WeightStore};
use crate::types::TensorType;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

/// Stable handle of a node (an operation).
pub type NodeId = NodeIndex<u32>;

/// Stable handle of a value (a tensor produced by one node output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// Index into per-value tables.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A tensor value: its name, type and producer.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Unique name, printed as `%name`.
    pub name: String,
    /// Static type.
    pub ty: TensorType,
    /// Node that produces it.
    pub producer: NodeId,
    /// Which output of the producer.
    pub output_index: usize,
}

/// An operation with its operands and results.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The operation.
    pub op: Op,
    /// Operands in order.
    pub inputs: Vec<ValueId>,
    /// Results in order.
    pub outputs: Vec<ValueId>,
    /// Creation sequence number; ties in topological order break by it, so
    /// printing is deterministic and follows construction order.
    pub seq: u64,
}

/// Edge payload: which value flows, into which operand slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    /// The value.
    pub value: ValueId,
    /// Operand position at the consumer.
    pub operand: usize,
}

/// Errors building or mutating a graph. Each names the node or value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// A name is defined twice.
    #[error("value `%{0}` is defined more than once")]
    DuplicateName(String),
    /// A value handle or name does not exist.
    #[error("value `{0}` is not defined")]
    UnknownValue(String),
    /// Shape or dtype inference failed.
    #[error("{op} `%{node}`: {message}")]
    Type {
        /// Node name (first output).
        node: String,
        /// Op name.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// The number of result names does not match the op.
    #[error("{op} `%{node}` produces {expected} values, but {found} names were given")]
    OutputCount {
        /// Node name.
        node: String,
        /// Op name.
        op: String,
        /// Results of the op.
        expected: usize,
        /// Names given.
        found: usize,
    },
    /// A constant's data does not match its declared type.
    #[error("constant `%{name}` is declared {declared} but its data is {found}")]
    ConstantType {
        /// Value name.
        name: String,
        /// Declared type.
        declared: TensorType,
        /// Type of the data.
        found: TensorType,
    },
    /// A bound weight does not fit its parameter.
    #[error("weight `{name}` is {found}, but parameter `%{param}` is declared {declared}")]
    WeightType {
        /// Tensor name in the weights file.
        name: String,
        /// Parameter value name.
        param: String,
        /// Declared type.
        declared: TensorType,
        /// Type of the data.
        found: TensorType,
    },
    /// An external parameter has no data.
    #[error("parameter `%{param}` needs tensor \"{tensor}\" from a weights file, but none was bound (pass --weights FILE.safetensors)")]
    MissingWeight {
        /// Parameter value name.
        param: String,
        /// Tensor name expected in the weights file.
        tensor: String,
    },
    /// The operation would create a cycle.
    #[error("cycle through `%{0}`")]
    Cycle(String),
}

/// A typed dataflow graph plus the weights its parameters and constants use.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Model name, printed in the header.
    pub name: String,
    dag: StableDiGraph<Node, Use>,
    values: Vec<Value>,
    by_name: HashMap<String, ValueId>,
    outputs: Vec<ValueId>,
    next_seq: u64,
    /// Data of `param` (when bound) and `const` values, by value name.
    pub weights: WeightStore,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Self {
        Graph {
            name: name.into(),
            ..Default::default()
        }
    }

    /// The underlying petgraph, for analyses that walk edges.
    pub fn dag(&self) -> &StableDiGraph<Node, Use> {
        &self.dag
    }

    fn check_fresh(&self, name: &str) -> Result<(), GraphError> {
        if self.by_name.contains_key(name) {
            Err(GraphError::DuplicateName(name.to_string()))
        } else {
            Ok(())
        }
    }

    fn insert(
        &mut self,
        op: Op,
        inputs: &[ValueId],
        outs: Vec<(String, TensorType)>,
    ) -> (NodeId, Vec<ValueId>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let node = self.dag.add_node(Node {
            op,
            inputs: inputs.to_vec(),
            outputs: vec![],
            seq,
        });
        let mut ids = Vec::with_capacity(outs.len());
        for (i, (name, ty)) in outs.into_iter().enumerate() {
            let id = ValueId(self.values.len() as u32);
            self.by_name.insert(name.clone(), id);
            self.values.push(Value {
                name,
                ty,
                producer: node,
                output_index: i,
            });
            ids.push(id);
        }
        self.dag[node].outputs = ids.clone();
        for (operand, &v) in inputs.iter().enumerate() {
            let src = self.values[v.index()].producer;
            self.dag.add_edge(src, node, Use { value: v, operand });
        }
        (node, ids)
    }

    /// Declares a graph input.
    pub fn add_input(&mut self, name: &str, ty: TensorType) -> Result<ValueId, GraphError> {
        self.check_fresh(name)?;
        Ok(self.insert(Op::Input, &[], vec![(name.into(), ty)]).1[0])
    }

    /// Declares a parameter with its type and initializer.
    pub fn add_param(
        &mut self,
        name: &str,
        ty: TensorType,
        init: Init,
    ) -> Result<ValueId, GraphError> {
        self.check_fresh(name)?;
        Ok(self.insert(Op::Param(init), &[], vec![(name.into(), ty)]).1[0])
    }

    /// Declares a constant; its data goes into the weight store.
    pub fn add_constant(&mut self, name: &str, data: Tensor) -> Result<ValueId, GraphError> {
        self.check_fresh(name)?;
        let ty = data.ty();
        self.weights.insert(name, data);
        Ok(self.insert(Op::Constant, &[], vec![(name.into(), ty)]).1[0])
    }

    /// Adds a computational node, inferring its result types. `names` gives
    /// one name per result.
    pub fn add_node(
        &mut self,
        op: Op,
        inputs: &[ValueId],
        names: &[&str],
    ) -> Result<Vec<ValueId>, GraphError> {
        let node_name = names.first().copied().unwrap_or("?").to_string();
        if names.len() != op.num_outputs() {
            return Err(GraphError::OutputCount {
                node: node_name,
                op: op.name().into(),
                expected: op.num_outputs(),
                found: names.len(),
            });
        }
        for (i, n) in names.iter().enumerate() {
            self.check_fresh(n)?;
            if names[..i].contains(n) {
                return Err(GraphError::DuplicateName(n.to_string()));
            }
        }
        for v in inputs {
            if v.index() >= self.values.len() {
                return Err(GraphError::UnknownValue(format!("#{}", v.0)));
            }
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|v| &self.values[v.index()].ty).collect();
        let out_tys = infer(&op, &tys).map_err(|message| GraphError::Type {
            node: node_name.clone(),
            op: op.name().into(),
            message,
        })?;
        let outs = names.iter().map(|n| n.to_string()).zip(out_tys).collect();
        Ok(self.insert(op, inputs, outs).1)
    }

    /// Single-result convenience over [`Graph::add_node`].
    pub fn add(&mut self, op: Op, inputs: &[ValueId], name: &str) -> Result<ValueId, GraphError> {
        Ok(self.add_node(op, inputs, &[name])?[0])
    }

    /// Sets the graph outputs.
    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) {
        self.outputs = outputs;
    }

    /// The graph outputs, in order.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// The graph inputs, in declaration order.
    pub fn inputs(&self) -> Vec<ValueId> {
        self.topo_order()
            .into_iter()
            .filter(|&n| matches!(self.dag[n].op, Op::Input))
            .map(|n| self.dag[n].outputs[0])
            .collect()
    }

    /// A node by handle.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.dag[id]
    }

    /// A value by handle.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    /// Looks a value up by name.
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// Number of value slots (including values of removed nodes).
    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    /// Number of live nodes.
    pub fn node_count(&self) -> usize {
        self.dag.node_count()
    }

    /// The name a node is known by: its first result's name.
    pub fn node_name(&self, id: NodeId) -> &str {
        &self.values[self.dag[id].outputs[0].index()].name
    }

    /// Nodes consuming `v`, with the operand slot, in creation order.
    pub fn users(&self, v: ValueId) -> Vec<(NodeId, usize)> {
        let p = self.values[v.index()].producer;
        let mut out: Vec<(NodeId, usize)> = self
            .dag
            .edges_directed(p, Direction::Outgoing)
            .filter(|e| e.weight().value == v)
            .map(|e| (e.target(), e.weight().operand))
            .collect();
        out.sort_by_key(|&(n, slot)| (self.dag[n].seq, slot));
        out
    }

    /// Live nodes in a deterministic topological order: Kahn's algorithm,
    /// ready nodes taken by creation sequence. A node without operands (a
    /// parameter, constant or input) ranks no later than its first
    /// reader, so a weight a pass creates late (a folded filter) does not
    /// hold back the node reading it, and the order of the computation,
    /// which backends follow, stays that of construction.
    pub fn topo_order(&self) -> Vec<NodeId> {
        let mut indeg: HashMap<NodeId, usize> = HashMap::new();
        for n in self.dag.node_indices() {
            indeg.insert(n, self.dag.edges_directed(n, Direction::Incoming).count());
        }
        let rank = |n: NodeId| {
            let own = self.dag[n].seq;
            if indeg[&n] > 0 {
                return own;
            }
            self.dag
                .edges_directed(n, Direction::Outgoing)
                .map(|e| self.dag[e.target()].seq)
                .fold(own, u64::min)
        };
        let mut ready: BTreeSet<(u64, u64, NodeId)> = indeg
            .iter()
            .filter(|(_, &d)| d == 0)
            .map(|(&n, _)| (rank(n), self.dag[n].seq, n))
            .collect();
        let mut order = Vec::with_capacity(indeg.len());
        while let Some(first) = ready.iter().next().copied() {
            ready.remove(&first);
            let n = first.2;
            order.push(n);
            for e in self.dag.edges_directed(n, Direction::Outgoing) {
                let d = indeg.get_mut(&e.target()).expect("node");
                *d -= 1;
                if *d == 0 {
                    let seq = self.dag[e.target()].seq;
                    ready.insert((seq, seq, e.target()));
                }
            }
        }
        order
    }

    /// The data of a `param` or `const` value: the bound tensor, else the
    /// initializer's output.
    pub fn weight(&self, v: ValueId) -> Result<Cow<'_, Tensor>, GraphError> {
        let val = &self.values[v.index()];
        if let Some(t) = self.weights.get(&val.name) {
            return Ok(Cow::Borrowed(t));
        }
        match &self.dag[val.producer].op {
            Op::Param(init) => match init.materialize(&val.ty) {
                Some(a) => Ok(Cow::Owned(Tensor::F32(a))),
                None => Err(GraphError::MissingWeight {
                    param: val.name.clone(),
                    tensor: match init {
                        Init::External(t) => t.clone(),
                        _ => val.name.clone(),
                    },
                }),
            },
            _ => Err(GraphError::UnknownValue(format!(
                "%{} has no weight data",
                val.name
            ))),
        }
    }

    /// Binds named tensors (e.g. from a safetensors file) to parameters.
    /// A tensor binds the parameter of the same name, or the parameter whose
    /// initializer is `external("<name>")`. Returns the names that matched
    /// no parameter.
    pub fn bind_weights(
        &mut self,
        tensors: impl IntoIterator<Item = (String, Tensor)>,
    ) -> Result<Vec<String>, GraphError> {
        let mut external: HashMap<String, ValueId> = HashMap::new();
        for n in self.dag.node_indices() {
            if let Op::Param(Init::External(t)) = &self.dag[n].op {
                external.insert(t.clone(), self.dag[n].outputs[0]);
            }
        }
        let mut unused = vec![];
        for (name, t) in tensors {
            let target = external.get(&name).copied().or_else(|| {
                self.by_name.get(&name).copied().filter(|v| {
                    matches!(self.dag[self.values[v.index()].producer].op, Op::Param(_))
                })
            });
            let Some(v) = target else {
                unused.push(name);
                continue;
            };
            let val = &self.values[v.index()];
            if t.ty() != val.ty {
                return Err(GraphError::WeightType {
                    name,
                    param: val.name.clone(),
                    declared: val.ty.clone(),
                    found: t.ty(),
                });
            }
            let key = val.name.clone();
            self.weights.insert(key, t);
        }
        Ok(unused)
    }

    /// Checks that every parameter has data (bound or from its initializer).
    pub fn check_weights_bound(&self) -> Result<(), GraphError> {
        for n in self.topo_order() {
            if let Op::Param(Init::External(t)) = &self.dag[n].op {
                let v = &self.values[self.dag[n].outputs[0].index()];
                if !self.weights.contains(&v.name) {
                    return Err(GraphError::MissingWeight {
                        param: v.name.clone(),
                        tensor: t.clone(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Redirects every use of `old` (including graph outputs) to `new`.
    /// Types must match; the caller keeps the graph acyclic.
    pub fn replace_all_uses(&mut self, old: ValueId, new: ValueId) -> Result<(), GraphError> {
        let (o, n) = (&self.values[old.index()], &self.values[new.index()]);
        if o.ty != n.ty {
            return Err(GraphError::Type {
                node: o.name.clone(),
                op: "replace".into(),
                message: format!("cannot replace {} with {} of type {}", o.ty, n.name, n.ty),
            });
        }
        let users = self.users(old);
        let old_src = self.values[old.index()].producer;
        let new_src = self.values[new.index()].producer;
        let edges: Vec<_> = self
            .dag
            .edges_directed(old_src, Direction::Outgoing)
            .filter(|e| e.weight().value == old)
            .map(|e| e.id())
            .collect();
        for e in edges {
            self.dag.remove_edge(e);
        }
        for (user, slot) in users {
            self.dag[user].inputs[slot] = new;
            self.dag.add_edge(
                new_src,
                user,
                Use {
                    value: new,
                    operand: slot,
                },
            );
        }
        for o in self.outputs.iter_mut() {
            if *o == old {
                *o = new;
            }
        }
        Ok(())
    }

    /// A type error at node `id` for its rewrite to `op`.
    fn type_error(&self, id: NodeId, op: &Op) -> impl Fn(String) -> GraphError {
        let (node, op) = (self.node_name(id).to_string(), op.name().to_string());
        move |message| GraphError::Type {
            node: node.clone(),
            op: op.clone(),
            message,
        }
    }

    /// Replaces a node's op and operand list in place, keeping its handle,
    /// creation sequence and result names, so a rewrite (e.g. a conv gaining
    /// a folded bias) does not move the node in the printed order. The new
    /// op must infer exactly the node's current result types.
    pub fn rewrite_node(
        &mut self,
        id: NodeId,
        op: Op,
        inputs: &[ValueId],
    ) -> Result<(), GraphError> {
        let type_err = self.type_error(id, &op);
        for v in inputs {
            if v.index() >= self.values.len()
                || !self.dag.contains_node(self.values[v.index()].producer)
            {
                return Err(GraphError::UnknownValue(format!("#{}", v.0)));
            }
        }
        let tys: Vec<&TensorType> = inputs.iter().map(|v| &self.values[v.index()].ty).collect();
        let out_tys = infer(&op, &tys).map_err(&type_err)?;
        let cur: Vec<&TensorType> = self.dag[id]
            .outputs
            .iter()
            .map(|v| &self.values[v.index()].ty)
            .collect();
        if out_tys.iter().collect::<Vec<_>>() != cur {
            return Err(type_err(
                "the rewrite would change the node's result types".into(),
            ));
        }
        for &v in inputs {
            let src = self.values[v.index()].producer;
            if src == id || petgraph::algo::has_path_connecting(&self.dag, id, src, None) {
                return Err(GraphError::Cycle(self.node_name(id).to_string()));
            }
        }
        let old: Vec<_> = self
            .dag
            .edges_directed(id, Direction::Incoming)
            .map(|e| e.id())
            .collect();
        for e in old {
            self.dag.remove_edge(e);
        }
        for (operand, &v) in inputs.iter().enumerate() {
            let src = self.values[v.index()].producer;
            self.dag.add_edge(src, id, Use { value: v, operand });
        }
        let node = &mut self.dag[id];
        node.op = op;
        node.inputs = inputs.to_vec();
        Ok(())
    }

    /// Replaces a multi-result node's op by one producing the node's
    /// current results in a new order (`order[j]` is the old index of
    /// new result `j`), keeping the handle, creation sequence, operands
    /// and every value's identity and uses: a Split whose parts a pass
    /// reorders stays where it was in the printed and executed order.
    /// The new op must infer exactly the permuted result types.
    pub fn permute_results(
        &mut self,
        id: NodeId,
        op: Op,
        order: &[usize],
    ) -> Result<(), GraphError> {
        let type_err = self.type_error(id, &op);
        let outs = self.dag[id].outputs.clone();
        let mut seen = vec![false; outs.len()];
        if order.len() != outs.len()
            || !order
                .iter()
                .all(|&i| i < seen.len() && !std::mem::replace(&mut seen[i], true))
        {
            return Err(type_err(format!(
                "{order:?} is no permutation of the node's {} results",
                outs.len()
            )));
        }
        let ins = self.dag[id].inputs.clone();
        let tys: Vec<&TensorType> = ins.iter().map(|v| &self.values[v.index()].ty).collect();
        let out_tys = infer(&op, &tys).map_err(&type_err)?;
        let want: Vec<&TensorType> = order
            .iter()
            .map(|&i| &self.values[outs[i].index()].ty)
            .collect();
        if out_tys.iter().collect::<Vec<_>>() != want {
            return Err(type_err(
                "the new op does not produce the results in the given order".into(),
            ));
        }
        let permuted: Vec<ValueId> = order.iter().map(|&i| outs[i]).collect();
        for (j, &v) in permuted.iter().enumerate() {
            self.values[v.index()].output_index = j;
        }
        let node = &mut self.dag[id];
        node.op = op;
        node.outputs = permuted;
        Ok(())
    }

    /// Renames a value (e.g. so a graph output keeps its name after the node
    /// producing it was folded away). Moves bound weight data along.
    pub fn rename_value(&mut self, v: ValueId, name: &str) -> Result<(), GraphError> {
        if v.index() >= self.values.len() {
            return Err(GraphError::UnknownValue(format!("#{}", v.0)));
        }
        if self.values[v.index()].name == name {
            return Ok(());
        }
        self.check_fresh(name)?;
        let old = std::mem::replace(&mut self.values[v.index()].name, name.to_string());
        self.by_name.remove(&old);
        self.by_name.insert(name.to_string(), v);
        if let Some(t) = self.weights.remove(&old) {
            self.weights.insert(name, t);
        }
        Ok(())
    }

    /// Removes a node whose results are unused. Its values' names are freed.
    pub fn remove_node(&mut self, id: NodeId) -> Result<(), GraphError> {
        let outs = self.dag[id].outputs.clone();
        for &v in &outs {
            if !self.users(v).is_empty() || self.outputs.contains(&v) {
                return Err(GraphError::Type {
                    node: self.values[v.index()].name.clone(),
                    op: self.dag[id].op.name().into(),
                    message: "cannot remove a node whose results are used".into(),
                });
            }
        }
        for &v in &outs {
            let name = self.values[v.index()].name.clone();
            self.by_name.remove(&name);
            self.weights.remove(&name);
        }
        self.dag.remove_node(id);
        Ok(())
    }
}
