//! DAG-aware extraction: each e-class's best node chosen by the cost of
//! the *set* of e-classes its program computes, each counted once, where
//! egg's greedy extractor adds up a tree and so counts a subexpression
//! used twice twice (which is exactly where sharing, and the merges that
//! create it, pay). A fixpoint over the e-classes as egg's extractor
//! runs, each class keeping the cheapest node found so far with its
//! class set (the "faster greedy DAG" heuristic of the e-graph extraction
//! literature: not optimal, but never worse than a tree on a DAG).

use super::analysis::TensorGraph;
use super::cost::charge;
use super::lang::TensorNode;
use egg::{Id, Language};

/// One e-class's choice: its node, the e-classes its program computes
/// (itself included) as a bit set over class indices, and their total
/// own cost when chosen.
#[derive(Clone, Debug)]
struct Choice {
    node: TensorNode,
    classes: Vec<u64>,
    total: f64,
}

fn has(set: &[u64], i: usize) -> bool {
    set[i / 64] >> (i % 64) & 1 == 1
}

/// The best node of every e-class reachable by the DAG cost.
pub struct DagExtractor {
    index: std::collections::HashMap<Id, usize>,
    best: Vec<Option<Choice>>,
    /// Own cost of each class's chosen node.
    own: Vec<f64>,
}

impl DagExtractor {
    /// Runs the fixpoint over `eg`: passes over the e-classes in id order
    /// (operands before users, as loaded) until no choice improves.
    pub fn new(eg: &TensorGraph) -> Self {
        let mut ids: Vec<Id> = eg.classes().map(|c| c.id).collect();
        ids.sort();
        let index: std::collections::HashMap<Id, usize> =
            ids.iter().enumerate().map(|(i, &c)| (c, i)).collect();
        let n = ids.len();
        let words = n.div_ceil(64);
        let mut best: Vec<Option<Choice>> = vec![None; n];
        let mut own = vec![0.0; n];
        let mut changed = true;
        while changed {
            changed = false;
            for (i, &id) in ids.iter().enumerate() {
                for node in eg[id].iter() {
                    let Some(cost) = charge(eg, node) else {
                        continue;
                    };
                    let mut set = vec![0u64; words];
                    let mut ok = true;
                    for &c in node.children() {
                        let j = index[&eg.find(c)];
                        match &best[j] {
                            // A child whose program computes this class
                            // would make a cycle.
                            Some(ch) if !has(&ch.classes, i) => {
                                for (w, x) in set.iter_mut().zip(&ch.classes) {
                                    *w |= x;
                                }
                            }
                            _ => {
                                ok = false;
                                break;
                            }
                        }
                    }
                    if !ok {
                        continue;
                    }
                    set[i / 64] |= 1 << (i % 64);
                    let mut total = cost;
                    for (wi, &w) in set.iter().enumerate() {
                        let mut w = w;
                        while w != 0 {
                            let b = w.trailing_zeros() as usize;
                            let k = wi * 64 + b;
                            if k != i {
                                total += own[k];
                            }
                            w &= w - 1;
                        }
                    }
                    if best[i].as_ref().is_none_or(|b| total < b.total) {
                        best[i] = Some(Choice {
                            node: node.clone(),
                            classes: set,
                            total,
                        });
                        own[i] = cost;
                        changed = true;
                    }
                }
            }
        }
        DagExtractor { index, best, own }
    }

    /// The chosen node of e-class `c` (canonical id), if it has one.
    pub fn best_node(&self, c: Id) -> Option<&TensorNode> {
        let i = *self.index.get(&c)?;
        self.best[i].as_ref().map(|b| &b.node)
    }

    /// The DAG cost of computing every class in `roots` (shared classes
    /// once).
    pub fn cost_of(&self, roots: &[Id]) -> Option<f64> {
        let words = self.best.len().div_ceil(64);
        let mut all = vec![0u64; words];
        for r in roots {
            let b = self.best[*self.index.get(r)?].as_ref()?;
            for (w, x) in all.iter_mut().zip(&b.classes) {
                *w |= x;
            }
        }
        Some(
            (0..self.best.len())
                .filter(|&k| has(&all, k))
                .map(|k| self.own[k])
                .sum(),
        )
    }
}

/// Merge-aware improvement of an extraction: a merge pays only when every
/// op it replaces takes its projection of the merged op, which no
/// per-class choice sees (each projection alone costs the whole merged
/// op). So for each multi-result class (a Split), every class holding one
/// of its projections switches to it at once, and the switch is kept when
/// the program computing `roots` gets cheaper (and stays acyclic); passes
/// repeat until none is kept. `base` gives the starting choice per class.
pub fn with_merges(
    eg: &TensorGraph,
    roots: &[Id],
    base: &dyn Fn(Id) -> TensorNode,
) -> std::collections::HashMap<Id, TensorNode> {
    let mut choice: std::collections::HashMap<Id, TensorNode> =
        eg.classes().map(|c| (c.id, base(c.id))).collect();
    // Projection-holding classes per split class, in id order.
    let mut gets: std::collections::BTreeMap<Id, Vec<(Id, TensorNode)>> = Default::default();
    for c in eg.classes() {
        for n in c.iter() {
            if let TensorNode::Get(_, [s]) = n {
                gets.entry(eg.find(*s)).or_default().push((c.id, n.clone()));
            }
        }
    }
    let roots: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    let mut best = program_cost(eg, &choice, &roots);
    for _ in 0..4 {
        let mut kept = false;
        for (split, members) in &gets {
            if members.iter().all(|(c, n)| choice.get(c) == Some(n)) {
                continue;
            }
            let mut trial = choice.clone();
            for (c, n) in members {
                trial.insert(*c, n.clone());
            }
            // The split class itself keeps its own best (not a projection).
            debug_assert!(trial.contains_key(split));
            let cost = program_cost(eg, &trial, &roots);
            if cost < best {
                best = cost;
                choice = trial;
                kept = true;
            }
        }
        if !kept {
            break;
        }
    }
    choice
}

/// Makes the choices that compute `roots` acyclic: the DAG heuristic
/// compares class sets recorded when each choice was made, so a later
/// choice can close a cycle through an earlier one. Where the program
/// reaches a class again on its own path, that class and every class its
/// `fallback` choice reaches take their `fallback` choices (egg's greedy
/// extraction, acyclic because every op costs more than its operands), and
/// the walk repeats; each round moves at least one class to the fallback.
pub fn repair_cycles(
    eg: &TensorGraph,
    choice: &mut std::collections::HashMap<Id, TensorNode>,
    roots: &[Id],
    fallback: &dyn Fn(Id) -> TensorNode,
) {
    let roots: Vec<Id> = roots.iter().map(|&r| eg.find(r)).collect();
    for _ in 0..=choice.len() {
        let Some(c) = first_cycle(eg, choice, &roots) else {
            return;
        };
        let mut stack = vec![c];
        let mut seen = std::collections::HashSet::new();
        while let Some(k) = stack.pop() {
            let k = eg.find(k);
            if !seen.insert(k) {
                continue;
            }
            let n = fallback(k);
            stack.extend(n.children().iter().copied());
            choice.insert(k, n);
        }
    }
}

/// A class the choices reach again on its own path from `roots`, if any.
fn first_cycle(
    eg: &TensorGraph,
    choice: &std::collections::HashMap<Id, TensorNode>,
    roots: &[Id],
) -> Option<Id> {
    walk(eg, choice, roots).err()
}

/// The cost of computing `roots` with `choice` (each class once), or
/// infinity when the choices form a cycle or miss a class.
fn program_cost(
    eg: &TensorGraph,
    choice: &std::collections::HashMap<Id, TensorNode>,
    roots: &[Id],
) -> f64 {
    let Ok(reached) = walk(eg, choice, roots) else {
        return f64::INFINITY;
    };
    reached
        .iter()
        .map(|c| choice.get(c).and_then(|n| charge(eg, n)))
        .sum::<Option<f64>>()
        .unwrap_or(f64::INFINITY)
}

/// Every class the program `choice` computes for `roots`, each once (a
/// class without a choice is a leaf), or `Err` with a class the program
/// reaches again on its own path (a cycle).
fn walk(
    eg: &TensorGraph,
    choice: &std::collections::HashMap<Id, TensorNode>,
    roots: &[Id],
) -> Result<Vec<Id>, Id> {
    // 1 on the path, 2 done.
    let mut state: std::collections::HashMap<Id, u8> = Default::default();
    let mut reached = Vec::new();
    for &r in roots {
        let mut stack = vec![(r, false)];
        while let Some((c, leaving)) = stack.pop() {
            let c = eg.find(c);
            if leaving {
                state.insert(c, 2);
                continue;
            }
            match state.get(&c) {
                Some(2) => continue,
                Some(1) => return Err(c),
                _ => {}
            }
            state.insert(c, 1);
            reached.push(c);
            stack.push((c, true));
            for &k in choice.get(&c).map_or(&[][..], |n| n.children()) {
                let k = eg.find(k);
                match state.get(&k) {
                    Some(2) => {}
                    Some(1) => return Err(k),
                    _ => stack.push((k, false)),
                }
            }
        }
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egraph::analysis::{SourceInfo, TensorAnalysis};
    use dnnc_ir::op::Unary;
    use dnnc_ir::{Op, TensorType};

    /// An empty e-graph whose one source `x` has type `ty`.
    fn graph_of_x(ty: TensorType) -> TensorGraph {
        let mut sources = std::collections::HashMap::new();
        sources.insert(
            "x".to_string(),
            SourceInfo {
                ty,
                weight: false,
                splat: None,
            },
        );
        TensorGraph::new(TensorAnalysis {
            sources,
            ..Default::default()
        })
    }

    /// `t = Add(Relu(s), Sigmoid(s))` with `s` twenty Tanhs of `x`, and
    /// `t` also equal to 26 Tanhs of `x` (six on top of `s`). The tree
    /// cost of the Add counts `s` twice (43 units) and takes the chain
    /// (26); the DAG cost counts `s` once (23) and keeps the Add.
    #[test]
    fn shared_subexpressions_count_once() {
        let ty = TensorType::f32([1, 8, 16, 16]);
        let mut eg = graph_of_x(ty);
        let x = eg.add(TensorNode::Source("x".into()));
        let tanh = |eg: &mut TensorGraph, from: Id, n: usize| {
            (0..n).fold(from, |a, _| {
                eg.add(TensorNode::op(Op::Unary(Unary::Tanh), vec![a]))
            })
        };
        let s = tanh(&mut eg, x, 20);
        let r = eg.add(TensorNode::op(Op::Unary(Unary::Relu), vec![s]));
        let g = eg.add(TensorNode::op(Op::Unary(Unary::Sigmoid), vec![s]));
        let t = eg.add(TensorNode::op(
            Op::Binary(dnnc_ir::op::Binary::Add),
            vec![r, g],
        ));
        let chain = tanh(&mut eg, s, 6);
        eg.union(t, chain);
        eg.rebuild();
        let t = eg.find(t);
        let greedy = egg::Extractor::new(&eg, crate::egraph::cost::RunTime { egraph: &eg });
        assert_eq!(greedy.find_best_node(t).op_name(), Some("Tanh"));
        let dag = DagExtractor::new(&eg);
        assert_eq!(dag.best_node(t).and_then(|n| n.op_name()), Some("Add"));
        // One elementwise op over the tensor, fused: its arithmetic.
        let unit = 8.0 * 16.0 * 16.0 / crate::egraph::cost::FUSED_RATE;
        let cost = dag.cost_of(&[t]).unwrap();
        assert!((cost / unit - 23.0).abs() < 0.01, "{}", cost / unit);
    }

    /// A choice map with a cycle (class `r` chosen as `Neg(n)`, `n` as
    /// `Neg(r)`) is repaired by the fallback: `r` takes `Relu(x)`, and
    /// the program from `n` is acyclic.
    #[test]
    fn cyclic_choices_fall_back() {
        let ty = TensorType::f32([1, 4]);
        let mut eg = graph_of_x(ty);
        let x = eg.add(TensorNode::Source("x".into()));
        let r = eg.add(TensorNode::op(Op::Unary(Unary::Relu), vec![x]));
        let n = eg.add(TensorNode::op(Op::Unary(Unary::Neg), vec![r]));
        let nn = eg.add(TensorNode::op(Op::Unary(Unary::Neg), vec![n]));
        eg.union(r, nn);
        eg.rebuild();
        let (r, n) = (eg.find(r), eg.find(n));
        let mut choice: std::collections::HashMap<Id, TensorNode> = Default::default();
        choice.insert(eg.find(x), TensorNode::Source("x".into()));
        choice.insert(r, TensorNode::op(Op::Unary(Unary::Neg), vec![n]));
        choice.insert(n, TensorNode::op(Op::Unary(Unary::Neg), vec![r]));
        assert!(first_cycle(&eg, &choice, &[n]).is_some());
        let greedy = egg::Extractor::new(&eg, crate::egraph::cost::RunTime { egraph: &eg });
        repair_cycles(&eg, &mut choice, &[n], &|c| {
            greedy.find_best_node(c).clone()
        });
        assert_eq!(first_cycle(&eg, &choice, &[n]), None);
        assert_eq!(choice[&r].op_name(), Some("Relu"));
        assert!(program_cost(&eg, &choice, &[n]).is_finite());
    }
}
