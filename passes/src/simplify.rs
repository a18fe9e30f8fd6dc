//! `simplify`: cheap, always-profitable clean-ups that later passes and the
//! backends should not have to special-case:
//! - Identity and (inference) Dropout are removed, their users reading the
//!   operand directly; when the result is a graph output, the operand takes
//!   over its name (and the node is kept if the operand is a source or has
//!   other users), so output names never change;
//! - a view (Reshape, Flatten, Squeeze, Unsqueeze) of a view becomes one
//!   Reshape of the original tensor (shapes are static), and a view that
//!   does not change the shape is removed;
//! - nodes that do not reach a graph output are deleted (dead-code
//!   elimination), including unused parameters and constants; graph inputs
//!   stay, as they are the model's signature.

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::{Graph, GraphError, NodeId, Op, ValueId};
use std::collections::HashSet;

/// The `simplify` pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct Simplify;

impl Pass for Simplify {
    fn name(&self) -> &'static str {
        "simplify"
    }
    fn description(&self) -> &'static str {
        "remove Identity/Dropout, collapse chains of reshapes, delete nodes that reach no output"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let err = |e| PassError::graph("simplify", e);
        let mut rewrites = 0;
        rewrites += remove_pass_throughs(g).map_err(err)?;
        rewrites += collapse_views(g).map_err(err)?;
        rewrites += eliminate_dead(g).map_err(err)?;
        Ok(PassStats {
            rewrites,
            ..Default::default()
        })
    }
}

fn is_output(g: &Graph, v: ValueId) -> bool {
    g.outputs().contains(&v)
}

/// Removes Identity and Dropout nodes, keeping graph output names.
fn remove_pass_throughs(g: &mut Graph) -> Result<usize, GraphError> {
    let mut n = 0;
    for id in g.topo_order() {
        let node = g.node(id);
        if !matches!(node.op, Op::Identity | Op::Dropout { .. }) || node.inputs.len() != 1 {
            continue;
        }
        let (src, out) = (node.inputs[0], node.outputs[0]);
        // A graph output keeps its name: the operand takes it over, when the
        // operand is a computed value used only here.
        let rename = is_output(g, out).then(|| g.value(out).name.clone());
        if rename.is_some()
            && (is_output(g, src)
                || g.users(src).len() != 1
                || g.node(g.value(src).producer).op.class() == dnnc_ir::OpClass::Source)
        {
            continue;
        }
        g.replace_all_uses(out, src)?;
        g.remove_node(id)?;
        if let Some(name) = rename {
            g.rename_value(src, &name)?;
        }
        n += 1;
    }
    Ok(n)
}

fn is_view_reshape(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. }
    )
}

/// Rewires a view of a view to read the inner view's operand as a single
/// Reshape; removes views that leave the shape unchanged.
fn collapse_views(g: &mut Graph) -> Result<usize, GraphError> {
    let mut n = 0;
    for id in g.topo_order() {
        let node = g.node(id);
        if !is_view_reshape(&node.op) || node.inputs.len() != 1 {
            continue;
        }
        let (mut src, out) = (node.inputs[0], node.outputs[0]);
        let producer = g.value(src).producer;
        let inner_is_view = is_view_reshape(&g.node(producer).op);
        if inner_is_view {
            src = g.node(producer).inputs[0];
        }
        let out_ty = g.value(out).ty.clone();
        if g.value(src).ty == out_ty && !is_output(g, out) {
            g.replace_all_uses(out, src)?;
            g.remove_node(id)?;
            n += 1;
        } else if inner_is_view && !out_ty.shape.contains(&0) {
            let shape = out_ty.shape.iter().map(|&d| d as i64).collect();
            g.rewrite_node(id, Op::Reshape { shape }, &[src])?;
            n += 1;
        }
    }
    Ok(n)
}

/// Deletes every node from which no graph output is reachable, except graph
/// inputs. Returns the number removed.
pub fn eliminate_dead(g: &mut Graph) -> Result<usize, GraphError> {
    let mut live: HashSet<NodeId> = HashSet::new();
    let mut stack: Vec<NodeId> = g.outputs().iter().map(|&v| g.value(v).producer).collect();
    while let Some(n) = stack.pop() {
        if live.insert(n) {
            stack.extend(g.node(n).inputs.iter().map(|&v| g.value(v).producer));
        }
    }
    let mut removed = 0;
    // Reverse topological order: users go before their producers.
    for id in g.topo_order().into_iter().rev() {
        if !live.contains(&id) && !matches!(g.node(id).op, Op::Input) {
            g.remove_node(id)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::text::{parse, print};

    fn before_after(src: &str) -> String {
        let mut g = parse(src, "test.dnn").unwrap();
        let before = print(&g);
        let stats = Simplify.run(&mut g).unwrap();
        dnnc_ir::verify(&g).unwrap();
        format!(
            "{before}--- simplify ({} rewrites) --->\n{}",
            stats.rewrites,
            print(&g)
        )
    }

    #[test]
    fn removes_pass_throughs_views_and_dead_code() {
        insta::assert_snapshot!(before_after(
            "graph t {
               input %x: f32[2,3,4]
               input %unused: f32[1]
               %i = Identity(%x)
               %d = Dropout(%i) {ratio=0.5}
               %r = Reshape(%d) {shape=[6,4]}
               %f = Flatten(%r) {axis=0}
               %u = Unsqueeze(%f) {axes=[0]}
               %same = Reshape(%u) {shape=[1,24]}
               %y = Relu(%same)
               param %w: f32[4] = ones
               %dead = Mul(%x, %w)
               %dead2 = Relu(%dead)
               %o = Identity(%y)
               output %o
             }"
        ));
    }

    #[test]
    fn identity_of_an_input_as_output_is_kept() {
        let src = "graph t {\n  input %x: f32[2]\n  %o: f32[2] = Identity(%x)\n  output %o\n}\n";
        let mut g = parse(src, "t.dnn").unwrap();
        assert_eq!(Simplify.run(&mut g).unwrap().rewrites, 0);
        assert_eq!(print(&g), src);
    }

    #[test]
    fn view_with_other_users_is_kept() {
        let mut g = parse(
            "graph t {
               input %x: f32[2,3]
               %r = Reshape(%x) {shape=[6]}
               %s = Reshape(%r) {shape=[3,2]}
               %a = Relu(%r)
               output %s, %a
             }",
            "t.dnn",
        )
        .unwrap();
        Simplify.run(&mut g).unwrap();
        let text = print(&g);
        assert!(text.contains("%r: f32[6] = Reshape(%x)"), "{text}");
        assert!(text.contains("%s: f32[3,2] = Reshape(%x)"), "{text}");
    }
}
