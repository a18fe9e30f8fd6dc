//! `split-order`: a merged convolution's output channels are reordered
//! so the Split part that opens (closes) a channel Concat comes last
//! (first).
//!
//! The e-graph's branch merges leave `Split(Conv2d(x, W, b))` whose
//! parts feed different consumers, typically one part straight into the
//! module's Concat (GoogLeNet's 1x1 branch) and the others into 3x3
//! convs. A backend building the Concat in place must otherwise copy
//! that part into it; with the part at the far end of the conv's result,
//! facing the Concat's buffer across its edge, the backend can place the
//! conv's whole result against the Concat so the part already is its
//! slice and every other part lies outside the Concat (the CPU backend
//! does: `codegen::cpu`'s routed Splits). Permuting the filter's rows,
//! the bias and the Split's sizes together computes the same values, so
//! the pass is an exact rewrite whatever backend follows.

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::infer::norm_axis;
use dnnc_ir::{Graph, GraphError, Init, NodeId, Op, Tensor, ValueId};
use ndarray::Axis;

/// The `split-order` pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct SplitOrder;

impl Pass for SplitOrder {
    fn name(&self) -> &'static str {
        "split-order"
    }
    fn description(&self) -> &'static str {
        "reorder a merged conv's output channels so the Split part that opens (closes) a channel Concat comes last (first), letting the Concat be built without a copy"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let err = |e| PassError::graph("split-order", e);
        let mut stats = PassStats::default();
        for s in g.topo_order() {
            let Some((conv, order)) = reorder_of(g, s) else {
                continue;
            };
            permute(g, conv, s, &order).map_err(err)?;
            stats.rewrites += 1;
        }
        Ok(stats)
    }
}

/// For Split node `s` over a convolution's channels: the conv and the
/// new order of the Split's parts (old indices), when one part is the
/// first (last) operand of a channel Concat and not already last
/// (first). The conv must be ungrouped, its filter and bias weights, and
/// its result read by the Split alone, directly or through per-element
/// unary ops (Relu, Clip) each read by the next alone.
fn reorder_of(g: &Graph, s: NodeId) -> Option<(NodeId, Vec<usize>)> {
    let node = g.node(s);
    let (Op::Split { axis, .. }, [x]) = (&node.op, &node.inputs[..]) else {
        return None;
    };
    let rank = g.value(*x).ty.shape.len();
    if rank != 4 || norm_axis(*axis, rank).ok()? != 1 || g.outputs().contains(x) {
        return None;
    }
    // Per-element unary ops (the merged conv's Relu) commute with the
    // permutation; each link must be read by the next alone.
    let mut conv = g.value(*x).producer;
    while let (Op::Unary(_), [y]) = (&g.node(conv).op, &g.node(conv).inputs[..]) {
        if g.users(*y).len() != 1 || g.outputs().contains(y) {
            return None;
        }
        conv = g.value(*y).producer;
    }
    let cn = g.node(conv);
    let Op::Conv2d(attrs) = &cn.op else {
        return None;
    };
    let weight =
        |v: &ValueId| matches!(g.node(g.value(*v).producer).op, Op::Param(_) | Op::Constant);
    if attrs.group != 1
        || cn.outputs.len() != 1
        || !cn.inputs[1..].iter().all(weight)
        || g.users(*x).len() != 1
    {
        return None;
    }
    let parts = node.outputs.len();
    for (i, &p) in node.outputs.iter().enumerate() {
        let users = g.users(p);
        let [(c, _)] = users[..] else {
            continue;
        };
        let cat = g.node(c);
        let Op::Concat { axis } = cat.op else {
            continue;
        };
        if g.outputs().contains(&p)
            || norm_axis(axis, rank).ok() != Some(1)
            || cat.inputs.iter().filter(|&&v| v == p).count() != 1
        {
            continue;
        }
        let target = if cat.inputs.first() == Some(&p) {
            parts - 1
        } else if cat.inputs.last() == Some(&p) {
            0
        } else {
            continue;
        };
        if target == i {
            return None;
        }
        let mut order: Vec<usize> = (0..parts).filter(|&j| j != i).collect();
        order.insert(target, i);
        return Some((conv, order));
    }
    None
}

/// Rewrites conv `conv` and Split `s` so the Split's parts come in
/// `order` (old part indices): the filter's and bias's output channels
/// permuted into fresh weights, the Split's results reordered in place.
fn permute(g: &mut Graph, conv: NodeId, s: NodeId, order: &[usize]) -> Result<(), GraphError> {
    let Op::Split { axis, split } = g.node(s).op.clone() else {
        return Ok(());
    };
    // Old channel ranges of each part, then the channels in new order.
    let mut starts = Vec::with_capacity(split.len());
    let mut at = 0;
    for &n in &split {
        starts.push(at);
        at += n;
    }
    let channels: Vec<usize> = order
        .iter()
        .flat_map(|&i| starts[i]..starts[i] + split[i])
        .collect();
    let cn = g.node(conv).clone();
    let mut inputs = cn.inputs.clone();
    for slot in inputs.iter_mut().skip(1) {
        let t = g.weight(*slot)?.into_owned();
        let Tensor::F32(a) = t else {
            return Err(GraphError::Type {
                node: g.node_name(conv).to_string(),
                op: "Conv2d".into(),
                message: "split-order permutes f32 weights only".into(),
            });
        };
        let permuted = a.select(Axis(0), &channels);
        let name = crate::tagged_name(g, &g.value(*slot).name, "", "order");
        let nv = g.add_param(
            &name,
            g.value(*slot).ty.clone(),
            Init::External(name.clone()),
        )?;
        g.weights.insert(name, Tensor::F32(permuted));
        *slot = nv;
    }
    let old_weights: Vec<ValueId> = cn.inputs[1..].to_vec();
    g.rewrite_node(conv, cn.op.clone(), &inputs)?;
    for w in old_weights {
        let p = g.value(w).producer;
        if g.users(w).is_empty() && !g.outputs().contains(&w) {
            g.remove_node(p)?;
        }
    }
    g.permute_results(
        s,
        Op::Split {
            axis,
            split: order.iter().map(|&i| split[i]).collect(),
        },
        order,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::run;
    use dnnc_ir::text::{parse, print};

    /// A merged 1x1 conv (what the e-graph's branch merge leaves): its
    /// first part opens a Concat, the others feed 3x3 convs.
    const MERGED: &str = "graph merged {
      input %x: f32[1,8,6,6]
      param %w: f32[14,8,1,1] = he(seed=1)
      param %b: f32[14] = uniform(low=-0.5, high=0.5, seed=2)
      %c = Conv2d(%x, %w, %b)
      %r = Relu(%c)
      %p1, %p2, %p3 = Split(%r) {axis=1, split=[4,6,4]}
      param %w2: f32[5,6,3,3] = he(seed=3)
      %q2 = Conv2d(%p2, %w2) {pads=[1,1,1,1]}
      param %w3: f32[3,4,3,3] = he(seed=4)
      %q3 = Conv2d(%p3, %w3) {pads=[1,1,1,1]}
      %cat = Concat(%p1, %q2, %q3) {axis=1}
      output %cat
    }";

    /// Runs the pass, verifies, checks the interpreter agrees bitwise (a
    /// permutation changes no sum); returns the stats.
    fn order_checked(g: &mut Graph) -> PassStats {
        let before = run(g);
        let stats = SplitOrder.run(g).unwrap();
        dnnc_ir::verify(g).unwrap();
        assert_eq!(run(g), before, "{}", print(g));
        stats
    }

    #[test]
    fn snapshot_merged_conv_part_opening_a_concat() {
        let mut g = parse(MERGED, "merged.dnn").unwrap();
        let before = print(&g);
        let stats = order_checked(&mut g);
        assert_eq!(stats.rewrites, 1);
        insta::assert_snapshot!(format!(
            "{before}--- split-order ({} rewrites) --->\n{}",
            stats.rewrites,
            print(&g)
        ));
    }

    #[test]
    fn a_part_closing_a_concat_moves_first() {
        let src = MERGED.replace(
            "%cat = Concat(%p1, %q2, %q3)",
            "%cat = Concat(%q2, %q3, %p1)",
        );
        let mut g = parse(&src, "closing.dnn").unwrap();
        assert_eq!(order_checked(&mut g).rewrites, 0, "p1 is first already");
        let src = MERGED
            .replace(
                "%cat = Concat(%p1, %q2, %q3)",
                "%cat = Concat(%q2, %q3, %p3)",
            )
            .replace("%q3 = Conv2d(%p3, %w3)", "%q3 = Conv2d(%p1, %w3)");
        let mut g = parse(&src, "closing.dnn").unwrap();
        assert_eq!(order_checked(&mut g).rewrites, 1);
        assert!(
            print(&g).contains("%p3: f32[1,4,6,6], %p1: f32[1,4,6,6], %p2: f32[1,6,6,6] = Split(%r) {axis=1, split=[4,4,6]}"),
            "{}",
            print(&g)
        );
    }

    #[test]
    fn left_alone_where_channels_cannot_move() {
        let cases = [
            // The conv's result is read by another node too.
            MERGED.replace("output %cat", "%extra = Sigmoid(%c)\n output %cat, %extra"),
            // A grouped conv's channels belong to their groups.
            MERGED
                .replace("param %w: f32[14,8,1,1]", "param %w: f32[14,4,1,1]")
                .replace(
                    "%c = Conv2d(%x, %w, %b)",
                    "%c = Conv2d(%x, %w, %b) {group=2}",
                ),
            // The part is also read elsewhere.
            MERGED.replace("output %cat", "%again = Relu(%p1)\n output %cat, %again"),
            // A Split over rows, not channels.
            "graph rows {
              input %x: f32[1,8,6,6]
              param %w: f32[14,8,1,1] = he(seed=1)
              %c = Conv2d(%x, %w)
              %p1, %p2 = Split(%c) {axis=2, split=[2,4]}
              %q2 = Relu(%p2)
              %cat = Concat(%p1, %q2) {axis=2}
              output %cat
            }"
            .to_string(),
        ];
        for src in cases {
            let mut g = parse(&src, "kept.dnn").unwrap();
            let before = print(&g);
            assert_eq!(order_checked(&mut g).rewrites, 0, "{before}");
            assert_eq!(print(&g), before);
        }
    }
}
