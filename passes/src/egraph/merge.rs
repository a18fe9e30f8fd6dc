//! Multi-pattern merges (TASO, Tensat): ops that share an operand become
//! one wider op whose result a Split hands back to each of them.
//!
//! Convolutions of one input with the same stride (and, for different
//! kernel sizes, padding that centres the smaller kernel in the larger)
//! become one convolution with the filters concatenated along the output
//! channels; MatMuls and Gemms of one left operand with weights-only
//! right operands become one with the columns concatenated. The merged
//! op's weights are weights-only expressions (`fold-weights` computes them
//! once), and at batch 1 the Split costs nothing: its results are slices
//! of the merged result (the CPU backend's in-place Split).
//!
//! # Cycles
//!
//! A merge unions each original op's class with a projection of a Split
//! of the merged op, which reads only the shared operand and weights, so
//! it adds no path from an op's result back to itself: the shared operand
//! is an operand of every merged op in the original graph, and weights
//! depend on nothing. What a merge could repeat is itself: the merged op
//! also reads the shared operand, and a later round would merge it with
//! the ops it replaced. A class that already holds a projection is
//! therefore never merged again (Tensat filters the cycles its merges
//! create per iteration; these merges create none to filter).

use super::analysis::TensorGraph;
use super::lang::TensorNode;
use super::rules::merge;
use dnnc_ir::op::{ConvAlgo, DataLayout, PadMode, Scalar};
use dnnc_ir::Op;
use egg::{Applier, Id, Language, PatternAst, Subst, Symbol, Var};

/// `?shared`: the operand the merged ops have in common.
pub(super) fn shared_var() -> Var {
    "?shared".parse().expect("var")
}

/// Which ops a merge takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    /// Conv2d of one input.
    Conv,
    /// MatMul or Gemm of one left operand.
    Contraction,
}

/// The merge rule's applier for one [`MergeKind`]: given a class read as
/// the first operand by at least two mergeable ops, applies every merge of
/// them (per group of compatible attributes).
pub struct MergeShared(pub MergeKind);

/// Every not-yet-merged class whose node `wanted` accepts reads `x` as its
/// first operand and that is not computed from another such class:
/// `(class, node)`, one node per class, by class id.
fn readers(
    eg: &TensorGraph,
    x: Id,
    wanted: impl Fn(&TensorGraph, &TensorNode) -> bool,
) -> Vec<(Id, TensorNode)> {
    let x = eg.find(x);
    let mut classes: Vec<Id> = eg[x].parents().map(|p| eg.find(p)).collect();
    classes.sort();
    classes.dedup();
    let mut out = Vec::new();
    for c in classes {
        if eg[c].iter().any(|n| matches!(n, TensorNode::Get(..))) {
            continue;
        }
        if let Some(n) = eg[c]
            .iter()
            .find(|n| n.children().first().map(|&a| eg.find(a)) == Some(x) && wanted(eg, n))
        {
            out.push((c, n.clone()));
        }
    }
    // A reader computed from another (a conv's class and the class of a
    // BatchNorm of it that a fold made a conv of the same input) is that
    // one rewritten, not a branch of its own.
    let ids: Vec<Id> = out.iter().map(|(c, _)| *c).collect();
    out.retain(|(c, _)| {
        !eg[*c]
            .iter()
            .any(|n| n.children().iter().any(|k| ids.contains(&eg.find(*k))))
    });
    out
}

/// Whether every operand but the first is weights-only.
fn weights_after_first(eg: &TensorGraph, n: &TensorNode) -> bool {
    n.children()[1..].iter().all(|&c| eg[c].data.weights_only)
}

/// A Conv2d the merge takes: ungrouped, weights-only filter and bias.
fn mergeable_conv(eg: &TensorGraph, n: &TensorNode) -> bool {
    matches!(n.ir_op(), Some(Op::Conv2d(p)) if p.group <= 1 && p.data == DataLayout::Nchw)
        && n.children().len() >= 2
        && weights_after_first(eg, n)
}

/// A MatMul or Gemm the merge takes: a weights-only rank-2 right operand
/// (and bias), a left operand that is not transposed.
fn mergeable_contraction(eg: &TensorGraph, n: &TensorNode) -> bool {
    let rank2 = |i: usize| eg[n.children()[i]].data.ty().is_some_and(|t| t.rank() == 2);
    match n.ir_op() {
        Some(Op::MatMul) => n.children().len() == 2 && weights_after_first(eg, n) && rank2(1),
        Some(Op::Gemm(p)) => !p.trans_a && weights_after_first(eg, n) && rank2(1),
        _ => false,
    }
}

impl MergeShared {
    fn wanted(&self) -> fn(&TensorGraph, &TensorNode) -> bool {
        match self.0 {
            MergeKind::Conv => mergeable_conv,
            MergeKind::Contraction => mergeable_contraction,
        }
    }
}

/// Whether at least two convs of class `x` would merge (`merge-convs`'s
/// match).
pub fn convs_to_merge(eg: &TensorGraph, x: Id) -> bool {
    readers(eg, x, mergeable_conv).len() >= 2
}

/// Whether at least two MatMuls/Gemms of class `x` would merge
/// (`merge-matmuls`'s match).
pub fn contractions_to_merge(eg: &TensorGraph, x: Id) -> bool {
    readers(eg, x, mergeable_contraction).len() >= 2
}

impl Applier<TensorNode, crate::egraph::analysis::TensorAnalysis> for MergeShared {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        _eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let x = subst[shared_var()];
        let members = readers(eg, x, self.wanted());
        let groups = match self.0 {
            MergeKind::Conv => conv_groups(eg, &members),
            MergeKind::Contraction => contraction_groups(&members),
        };
        let mut changed = Vec::new();
        for g in groups {
            let picked: Vec<&(Id, TensorNode)> = g.members.iter().map(|&i| &members[i]).collect();
            let Some(parts) = (match self.0 {
                MergeKind::Conv => merged_conv(eg, x, &picked, &g),
                MergeKind::Contraction => merged_contraction(eg, x, &picked),
            }) else {
                continue;
            };
            for ((class, _), part) in picked.iter().zip(parts) {
                changed.extend(merge(eg, *class, [part], rule));
            }
        }
        changed
    }
}

/// Members (indices into the readers) merged into one op, and for convs
/// the kernel size and padding the merged filter has.
struct Group {
    members: Vec<usize>,
    kernel: [usize; 2],
    pads: [usize; 4],
}

/// The conv groups: convs with equal attributes, kernel size and padding
/// (one group per such set of two or more), and, where the convs of one
/// stride differ in kernel size, the group of all of them whose padding
/// centres their kernels in the largest (smaller filters are zero-padded).
fn conv_groups(eg: &TensorGraph, members: &[(Id, TensorNode)]) -> Vec<Group> {
    let geo = |n: &TensorNode| -> Option<(dnnc_ir::op::Conv2d, [usize; 2], bool)> {
        let Some(Op::Conv2d(p)) = n.ir_op() else {
            return None;
        };
        let w = eg[n.children()[1]].data.ty()?;
        let (&kh, &kw) = (w.shape.get(2)?, w.shape.get(3)?);
        Some((p.clone(), [kh, kw], n.children().len() == 3))
    };
    let infos: Vec<_> = members.iter().map(|(_, n)| geo(n)).collect();
    let mut groups: Vec<Group> = Vec::new();
    let mut exact: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        let Some((p, k, bias)) = info else { continue };
        match exact.iter_mut().find(|(j, _)| {
            let (q, kj, bj) = infos[*j].as_ref().expect("typed");
            q == p && kj == k && bj == bias
        }) {
            Some((_, v)) => v.push(i),
            None => exact.push((i, vec![i])),
        }
    }
    for (first, v) in &exact {
        if v.len() >= 2 {
            let (p, k, _) = infos[*first].as_ref().expect("typed");
            groups.push(Group {
                members: v.clone(),
                kernel: *k,
                pads: p.pads,
            });
        }
    }
    // Zero-padded smaller kernels: same strides, dilation 1, auto algo;
    // every member's padding grown by half the kernel difference equal.
    let mut families: Vec<Vec<usize>> = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        let Some((p, _, _)) = info else { continue };
        if p.dilations != [1, 1] || p.algo != ConvAlgo::Auto {
            continue;
        }
        match families
            .iter_mut()
            .find(|f| infos[f[0]].as_ref().expect("typed").0.strides == p.strides)
        {
            Some(f) => f.push(i),
            None => families.push(vec![i]),
        }
    }
    for f in families {
        let kernels: Vec<[usize; 2]> = f
            .iter()
            .map(|&i| infos[i].as_ref().expect("typed").1)
            .collect();
        if kernels.iter().all(|k| *k == kernels[0]) {
            continue;
        }
        let big = [0, 1].map(|a| kernels.iter().map(|k| k[a]).max().unwrap_or(1));
        let grown = |i: usize| -> Option<[usize; 4]> {
            let (p, k, _) = infos[i].as_ref()?;
            let e = [0, 1].map(|a| big[a] - k[a]);
            if e.iter().any(|d| d % 2 != 0) {
                return None;
            }
            let [eh, ew] = e.map(|d| d / 2);
            Some([
                p.pads[0] + eh,
                p.pads[1] + ew,
                p.pads[2] + eh,
                p.pads[3] + ew,
            ])
        };
        let Some(pads) = grown(f[0]) else { continue };
        if f.iter().all(|&i| grown(i) == Some(pads)) {
            groups.push(Group {
                members: f,
                kernel: big,
                pads,
            });
        }
    }
    groups
}

/// The contraction groups: MatMuls, and Gemms with equal attributes and
/// all with or all without a bias.
fn contraction_groups(members: &[(Id, TensorNode)]) -> Vec<Group> {
    let mut keyed: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, (_, n)) in members.iter().enumerate() {
        let key = format!("{}/{}", n, n.children().len());
        match keyed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(i),
            None => keyed.push((key, vec![i])),
        }
    }
    keyed
        .into_iter()
        .filter(|(_, v)| v.len() >= 2)
        .map(|(_, members)| Group {
            members,
            kernel: [1, 1],
            pads: [0; 4],
        })
        .collect()
}

fn add(eg: &mut TensorGraph, op: Op, args: Vec<Id>) -> Id {
    eg.add(TensorNode::op(op, args))
}

/// Adds the merged conv of `picked` (filters zero-padded to the group's
/// kernel, biases concatenated, a zero bias for a member without one when
/// others have one) and its Split; the projection for each member, or
/// `None` when a type is unknown.
fn merged_conv(
    eg: &mut TensorGraph,
    x: Id,
    picked: &[&(Id, TensorNode)],
    g: &Group,
) -> Option<Vec<Id>> {
    let mut filters = Vec::new();
    let mut biases = Vec::new();
    let mut sizes = Vec::new();
    let any_bias = picked.iter().any(|(_, n)| n.children().len() == 3);
    let mut attrs = None;
    for (_, n) in picked {
        let Some(Op::Conv2d(p)) = n.ir_op() else {
            return None;
        };
        attrs.get_or_insert_with(|| p.clone());
        let w = n.children()[1];
        let shape = eg[w].data.ty()?.shape.clone();
        let (m, kh, kw) = (*shape.first()?, *shape.get(2)?, *shape.get(3)?);
        let w = if [kh, kw] == g.kernel {
            w
        } else {
            let (eh, ew) = (
                ((g.kernel[0] - kh) / 2) as i64,
                ((g.kernel[1] - kw) / 2) as i64,
            );
            let pad = Op::Pad {
                pads: vec![0, 0, eh, ew, 0, 0, eh, ew],
                mode: PadMode::Constant,
                value: 0.0,
            };
            add(eg, pad, vec![w])
        };
        filters.push(w);
        if any_bias {
            biases.push(match n.children().get(2) {
                Some(&b) => b,
                None => add(
                    eg,
                    Op::ConstantOfShape {
                        shape: vec![m],
                        value: Scalar::F32(0.0),
                    },
                    vec![],
                ),
            });
        }
        sizes.push(m);
    }
    let mut p = attrs?;
    p.pads = g.pads;
    let w = add(eg, Op::Concat { axis: 0 }, filters);
    let mut args = vec![x, w];
    if any_bias {
        args.push(add(eg, Op::Concat { axis: 0 }, biases));
    }
    let conv = add(eg, Op::Conv2d(p), args);
    Some(split_back(eg, conv, 1, sizes))
}

/// Adds the merged MatMul or Gemm of `picked` (right operands and biases
/// concatenated along the result's columns) and its Split.
fn merged_contraction(
    eg: &mut TensorGraph,
    x: Id,
    picked: &[&(Id, TensorNode)],
) -> Option<Vec<Id>> {
    let first = picked.first()?.1.ir_op()?.clone();
    let trans_b = matches!(&first, Op::Gemm(p) if p.trans_b);
    let mut rights = Vec::new();
    let mut biases = Vec::new();
    let mut sizes = Vec::new();
    for (_, n) in picked {
        let b = n.children()[1];
        let shape = eg[b].data.ty()?.shape.clone();
        let cols = if trans_b { shape[0] } else { shape[1] };
        rights.push(b);
        if let Some(&c) = n.children().get(2) {
            // Only a per-column bias concatenates into one.
            let t = eg[c].data.ty()?;
            if !matches!(t.shape[..], [a] | [1, a] if a == cols) {
                return None;
            }
            biases.push(add(
                eg,
                Op::Reshape {
                    shape: vec![cols as i64],
                },
                vec![c],
            ));
        }
        sizes.push(cols);
    }
    let b = add(
        eg,
        Op::Concat {
            axis: if trans_b { 0 } else { 1 },
        },
        rights,
    );
    let mut args = vec![x, b];
    if !biases.is_empty() {
        args.push(add(eg, Op::Concat { axis: 0 }, biases));
    }
    let rank = eg[x].data.ty()?.rank();
    let merged = add(eg, first, args);
    Some(split_back(eg, merged, rank.max(2) - 1, sizes))
}

/// `Split(merged)` along `axis` into `sizes`, and a projection per piece.
fn split_back(eg: &mut TensorGraph, merged: Id, axis: usize, sizes: Vec<usize>) -> Vec<Id> {
    let n = sizes.len();
    let split = add(
        eg,
        Op::Split {
            axis: axis as i64,
            split: sizes,
        },
        vec![merged],
    );
    (0..n)
        .map(|i| eg.add(TensorNode::Get(i, [split])))
        .collect()
}

/// Given an elementwise unary op of a projection of a Split, adds the
/// projection of the Split of the op on the Split's operand
/// (so the op of every piece is one op on the whole, fused into the
/// merged op's kernel).
pub struct UnaryOverSplit;

/// `(unary op, piece index, split op, split operand)` of every unary op of
/// a Split's projection in `eclass`.
fn unary_of_split(eg: &TensorGraph, eclass: Id) -> Vec<(Op, usize, Op, Id)> {
    let mut out = Vec::new();
    for n in eg[eclass].iter() {
        let Some(u @ Op::Unary(_)) = n.ir_op() else {
            continue;
        };
        if n.children().len() != 1 {
            continue;
        }
        for get in eg[n.children()[0]].iter() {
            let TensorNode::Get(i, [s]) = get else {
                continue;
            };
            for split in eg[*s].iter() {
                if let Some(sp @ Op::Split { .. }) = split.ir_op() {
                    out.push((u.clone(), *i, sp.clone(), split.children()[0]));
                }
            }
        }
    }
    out
}

/// Whether class `c` holds an elementwise unary op of a Split's piece
/// (`unary-over-split`'s match).
pub fn unary_of_a_piece(eg: &TensorGraph, c: Id) -> bool {
    !unary_of_split(eg, c).is_empty()
}

impl Applier<TensorNode, crate::egraph::analysis::TensorAnalysis> for UnaryOverSplit {
    fn apply_one(
        &self,
        eg: &mut TensorGraph,
        eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TensorNode>>,
        rule: Symbol,
    ) -> Vec<Id> {
        let mut ids = Vec::new();
        for (u, i, sp, x) in unary_of_split(eg, eclass) {
            let ux = add(eg, u, vec![x]);
            let s = add(eg, sp, vec![ux]);
            ids.push(eg.add(TensorNode::Get(i, [s])));
        }
        merge(eg, eclass, ids, rule)
    }
}
