//! The IR into the e-graph and the extracted program back into the IR.
//! Every value keeps its name where its e-class is extracted as a node of
//! its own; graph outputs always keep theirs.

use super::analysis::{SourceInfo, TensorAnalysis, TensorGraph};
use super::lang::TensorNode;
use dnnc_ir::{Graph, GraphError, Init, Op, Tensor, ValueId};
use egg::Id;
use std::collections::{HashMap, HashSet};

/// A graph loaded into an e-graph.
pub struct Loaded {
    /// The e-graph (rebuilt).
    pub egraph: TensorGraph,
    /// The e-class of every value, by `ValueId` index.
    pub class_of: Vec<Id>,
}

/// The value of every element of `t` when they are all equal.
fn splat_of(t: &Tensor) -> Option<f32> {
    let a = t.as_f32()?;
    let first = *a.iter().next()?;
    a.iter()
        .all(|&v| v.to_bits() == first.to_bits())
        .then_some(first)
}

/// Loads `g` into a fresh e-graph: one e-node per node (identical
/// subexpressions share an e-class), a projection per result of a
/// multi-result op.
pub fn load(g: &Graph) -> Loaded {
    let mut sources = HashMap::new();
    for id in g.topo_order() {
        let node = g.node(id);
        let (weight, splat) = match &node.op {
            Op::Input => (false, None),
            Op::Param(init) => {
                let v = &g.value(node.outputs[0]).name;
                let splat = match (init, g.weights.get(v)) {
                    (_, Some(t)) => splat_of(t),
                    (Init::Zeros, None) => Some(0.0),
                    (Init::Ones, None) => Some(1.0),
                    (Init::Constant(c), None) => Some(*c),
                    _ => None,
                };
                (true, splat)
            }
            Op::Constant => {
                let v = &g.value(node.outputs[0]).name;
                (true, g.weights.get(v).and_then(splat_of))
            }
            _ => continue,
        };
        let v = g.value(node.outputs[0]);
        sources.insert(
            v.name.clone(),
            SourceInfo {
                ty: v.ty.clone(),
                weight,
                splat,
            },
        );
    }
    let mut egraph = TensorGraph::new(TensorAnalysis {
        sources,
        ..Default::default()
    });
    let mut class_of = vec![Id::from(0usize); g.value_count()];
    for id in g.topo_order() {
        let node = g.node(id);
        if node.op.class() == dnnc_ir::OpClass::Source {
            let v = node.outputs[0];
            class_of[v.index()] = egraph.add(TensorNode::Source(g.value(v).name.clone()));
            continue;
        }
        let args = node.inputs.iter().map(|v| class_of[v.index()]).collect();
        let c = egraph.add(TensorNode::op(node.op.clone(), args));
        if node.outputs.len() == 1 {
            class_of[node.outputs[0].index()] = c;
        } else {
            for (i, &v) in node.outputs.iter().enumerate() {
                class_of[v.index()] = egraph.add(TensorNode::Get(i, [c]));
            }
        }
    }
    egraph.rebuild();
    Loaded { egraph, class_of }
}

/// Writes the program `best` picks from each e-class back as a graph:
/// `g`'s inputs (all of them, in order), the parameters and constants the
/// program reads (with their data), one node per extracted op e-node, and
/// `g`'s outputs under their names. A value is named after a value of `g`
/// in its e-class when one is free, else after the e-class's first name
/// with a numbered suffix.
pub fn extract(
    g: &Graph,
    egraph: &TensorGraph,
    class_of: &[Id],
    best: &dyn Fn(Id) -> TensorNode,
) -> Result<Graph, GraphError> {
    let mut names: HashMap<Id, Vec<String>> = HashMap::new();
    // Output names first, so an output's class is named after it.
    let mut order: Vec<ValueId> = g.outputs().to_vec();
    order.extend((0..g.value_count() as u32).map(ValueId));
    for v in order {
        let c = egraph.find(class_of[v.index()]);
        let n = &g.value(v).name;
        let e = names.entry(c).or_default();
        if !e.contains(n) {
            e.push(n.clone());
        }
    }
    let mut x = Extraction {
        g,
        egraph,
        best,
        names,
        used: HashSet::new(),
        out: Graph::new(g.name.clone()),
        done: HashMap::new(),
        open: HashSet::new(),
        fresh: 0,
    };
    for v in g.inputs() {
        let val = g.value(v);
        x.used.insert(val.name.clone());
        let nv = x.out.add_input(&val.name, val.ty.clone())?;
        x.done.insert(egraph.find(class_of[v.index()]), vec![nv]);
    }
    // The parameters and constants the program reads, in `g`'s order.
    let mut seen = HashSet::new();
    let mut stack: Vec<Id> = g.outputs().iter().map(|o| class_of[o.index()]).collect();
    let mut read = HashSet::new();
    while let Some(c) = stack.pop() {
        let c = egraph.find(c);
        if !seen.insert(c) {
            continue;
        }
        let n = best(c);
        if let TensorNode::Source(name) = &n {
            read.insert(name.clone());
        }
        stack.extend(egg::Language::children(&n).iter().copied());
    }
    for id in g.topo_order() {
        let node = g.node(id);
        if matches!(node.op, Op::Param(_) | Op::Constant) {
            let v = node.outputs[0];
            if read.contains(&g.value(v).name) {
                x.values(class_of[v.index()])?;
            }
        }
    }
    let mut outs = Vec::new();
    for &o in g.outputs() {
        let c = egraph.find(class_of[o.index()]);
        let v = x.value(c)?;
        let want = &g.value(o).name;
        // An output whose class another output (or a source) already
        // named keeps its own name through an Identity.
        let v = if &x.out.value(v).name == want {
            v
        } else {
            x.used.insert(want.clone());
            x.out.add(Op::Identity, &[v], want)?
        };
        outs.push(v);
    }
    x.out.set_outputs(outs);
    Ok(x.out)
}

struct Extraction<'a> {
    g: &'a Graph,
    egraph: &'a TensorGraph,
    best: &'a dyn Fn(Id) -> TensorNode,
    names: HashMap<Id, Vec<String>>,
    used: HashSet<String>,
    out: Graph,
    /// The values emitted for each e-class (several for a tuple class).
    done: HashMap<Id, Vec<ValueId>>,
    /// The e-classes being emitted (a choice that reaches one again is a
    /// cycle, which an extraction must not contain).
    open: HashSet<Id>,
    fresh: usize,
}

impl Extraction<'_> {
    /// A free name for a value of class `c` (result `i` of a tuple class
    /// takes the names of its projection's class).
    fn name_for(&mut self, c: Id) -> String {
        let cands = self.names.get(&c).cloned().unwrap_or_default();
        if let Some(n) = cands.iter().find(|n| !self.used.contains(*n)) {
            self.used.insert(n.clone());
            return n.clone();
        }
        let base = cands.first().cloned().unwrap_or_else(|| "eg".to_string());
        loop {
            self.fresh += 1;
            let n = format!("{base}_{}", self.fresh);
            if !self.used.contains(&n) && self.g.value_by_name(&n).is_none() {
                self.used.insert(n.clone());
                return n;
            }
        }
    }

    /// The single value of e-class `c`, emitting it (and what it reads)
    /// first.
    fn value(&mut self, c: Id) -> Result<ValueId, GraphError> {
        let vs = self.values(c)?;
        vs.first()
            .copied()
            .ok_or_else(|| GraphError::UnknownValue(format!("e-class {c} has no value")))
    }

    /// The values of e-class `c`.
    fn values(&mut self, c: Id) -> Result<Vec<ValueId>, GraphError> {
        let c = self.egraph.find(c);
        if let Some(v) = self.done.get(&c) {
            return Ok(v.clone());
        }
        if !self.open.insert(c) {
            return Err(GraphError::UnknownValue(format!(
                "e-class {c}, which the extracted program computes from itself"
            )));
        }
        let node = (self.best)(c);
        let vs = match &node {
            TensorNode::Source(name) => {
                let v = self
                    .g
                    .value_by_name(name)
                    .ok_or_else(|| GraphError::UnknownValue(name.clone()))?;
                let val = self.g.value(v);
                self.used.insert(name.clone());
                let nv = match &self.g.node(val.producer).op {
                    Op::Param(init) => {
                        let nv = self.out.add_param(name, val.ty.clone(), init.clone())?;
                        if let Some(t) = self.g.weights.get(name) {
                            self.out.weights.insert(name.clone(), t.clone());
                        }
                        nv
                    }
                    Op::Constant => {
                        let t = self
                            .g
                            .weights
                            .get(name)
                            .ok_or_else(|| GraphError::UnknownValue(name.clone()))?;
                        self.out.add_constant(name, t.clone())?
                    }
                    // Inputs were all emitted first.
                    _ => return Err(GraphError::UnknownValue(name.clone())),
                };
                vec![nv]
            }
            TensorNode::Get(i, [t]) => {
                let vs = self.values(*t)?;
                vec![*vs.get(*i).ok_or_else(|| {
                    GraphError::UnknownValue(format!("result {i} of e-class {t}"))
                })?]
            }
            TensorNode::Op(key, args) => {
                let op = key.op().cloned().ok_or_else(|| {
                    GraphError::UnknownValue(format!("pattern op `{}` in the e-graph", key.name()))
                })?;
                let mut ins = Vec::with_capacity(args.len());
                for &a in args {
                    ins.push(self.value(a)?);
                }
                let n = op.num_outputs();
                let names: Vec<String> = if n == 1 {
                    vec![self.name_for(c)]
                } else {
                    (0..n)
                        .map(|i| {
                            let p = self
                                .egraph
                                .lookup(TensorNode::Get(i, [c]))
                                .map(|p| self.egraph.find(p))
                                .unwrap_or(c);
                            self.name_for(p)
                        })
                        .collect()
                };
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                self.out.add_node(op, &ins, &refs)?
            }
        };
        self.open.remove(&c);
        self.done.insert(c, vs.clone());
        Ok(vs)
    }
}
