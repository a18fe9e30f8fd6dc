//! `fold-batchnorm`: compile-time folding of per-channel affine ops into the
//! contraction before them, so inference runs one conv instead of a conv and
//! a full extra pass over its output.
//!
//! An inference BatchNormalization is `y = x·s + t` per channel with
//! `s = γ/√(σ²+ε)` and `t = β − μ·s`; a Mul/Add/Sub/Div of a conv output by a
//! per-channel constant is the same shape of map. When `x` comes from a
//! Conv2d (or a 2-D Gemm), `x` has no other user and is not a graph output,
//! and all the weights are `param`/`const` values with data, the conv is
//! rewritten to read NEW parameters `w' = w·s` (per output channel) and
//! `b' = b·s + t`, and the affine node is dropped. The original weights are
//! never mutated (they may be shared); they are deleted when unused. New
//! parameters are `param`s whose data sits in the weight store (printed
//! without an initializer). Folds whose weights cannot be materialised are
//! skipped with a note.

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::op::{Binary, Gemm};
use dnnc_ir::{DType, Graph, GraphError, Init, NodeId, Op, Tensor, ValueId};
use ndarray::{ArrayD, Axis, IxDyn};

/// The `fold-batchnorm` pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldBatchNorm;

impl Pass for FoldBatchNorm {
    fn name(&self) -> &'static str {
        "fold-batchnorm"
    }
    fn description(&self) -> &'static str {
        "fold inference BatchNormalization and per-channel constant Mul/Add/Sub/Div into the preceding Conv2d/Gemm weights"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let err = |e| PassError::graph("fold-batchnorm", e);
        let mut stats = PassStats::default();
        loop {
            let mut changed = false;
            for id in g.topo_order() {
                if !g.dag().contains_node(id) {
                    continue;
                }
                match try_fold(g, id).map_err(err)? {
                    Outcome::Folded => {
                        stats.rewrites += 1;
                        changed = true;
                    }
                    Outcome::Skipped(note) => {
                        if !stats.notes.contains(&note) {
                            stats.notes.push(note);
                        }
                    }
                    Outcome::NotApplicable => {}
                }
            }
            if !changed {
                break;
            }
        }
        Ok(stats)
    }
}

enum Outcome {
    Folded,
    Skipped(String),
    NotApplicable,
}

/// `y = x·scale + shift` along axis 1.
struct Affine {
    scale: Vec<f64>,
    shift: Vec<f64>,
}

fn is_weight(g: &Graph, v: ValueId) -> bool {
    matches!(g.node(g.value(v).producer).op, Op::Param(_) | Op::Constant)
}

/// f32 data of a weight value, widened to f64.
fn weight_f64(g: &Graph, v: ValueId) -> Result<ArrayD<f64>, String> {
    let t = g.weight(v).map_err(|e| e.to_string())?;
    match t.as_f32() {
        Some(a) => Ok(a.mapv(f64::from)),
        None => Err(format!("%{} is not f32", g.value(v).name)),
    }
}

/// A constant operand of shape broadcastable along axis 1 only, to an
/// output of rank `rank` with `c` channels, as one value per channel.
fn per_channel(a: &ArrayD<f64>, rank: usize, c: usize) -> Option<Vec<f64>> {
    let shape = a.shape();
    if shape.len() > rank {
        return None;
    }
    let pad = rank - shape.len();
    let mut along = 1;
    for (i, &d) in shape.iter().enumerate() {
        let axis = i + pad;
        if axis == 1 {
            along = d;
        } else if d != 1 {
            return None;
        }
    }
    if along != 1 && along != c {
        return None;
    }
    let flat: Vec<f64> = a.iter().copied().collect();
    Some(
        (0..c)
            .map(|i| flat[if along == 1 { 0 } else { i }])
            .collect(),
    )
}

/// The affine map of node `id` and its activation operand, if it is one.
fn affine_of(g: &Graph, id: NodeId) -> Result<Option<(ValueId, Affine)>, String> {
    let node = g.node(id);
    let out = &g.value(node.outputs[0]).ty;
    if out.dtype != DType::F32 || out.rank() < 2 {
        return Ok(None);
    }
    let c = out.shape[1];
    match &node.op {
        Op::BatchNormalization { epsilon } => {
            if !node.inputs[1..].iter().all(|&v| is_weight(g, v)) {
                return Ok(None);
            }
            let p: Vec<ArrayD<f64>> = node.inputs[1..]
                .iter()
                .map(|&v| weight_f64(g, v))
                .collect::<Result<_, _>>()?;
            let (gamma, beta, mean, var) = (&p[0], &p[1], &p[2], &p[3]);
            let mut a = Affine {
                scale: vec![0.0; c],
                shift: vec![0.0; c],
            };
            for i in 0..c {
                let s = gamma[i] / (var[i] + f64::from(*epsilon)).sqrt();
                a.scale[i] = s;
                a.shift[i] = beta[i] - mean[i] * s;
            }
            Ok(Some((node.inputs[0], a)))
        }
        Op::Binary(b @ (Binary::Add | Binary::Sub | Binary::Mul | Binary::Div)) => {
            let (x, k) = match (is_weight(g, node.inputs[0]), is_weight(g, node.inputs[1])) {
                (false, true) => (node.inputs[0], node.inputs[1]),
                (true, false) if matches!(b, Binary::Add | Binary::Mul) => {
                    (node.inputs[1], node.inputs[0])
                }
                _ => return Ok(None),
            };
            if &g.value(x).ty != out {
                return Ok(None);
            }
            let Some(k) = per_channel(&weight_f64(g, k)?, out.rank(), c) else {
                return Ok(None);
            };
            let ones = vec![1.0; c];
            let zeros = vec![0.0; c];
            let a = match b {
                Binary::Add => Affine {
                    scale: ones,
                    shift: k,
                },
                Binary::Sub => Affine {
                    scale: ones,
                    shift: k.iter().map(|v| -v).collect(),
                },
                Binary::Mul => Affine {
                    scale: k,
                    shift: zeros,
                },
                _ => {
                    if k.contains(&0.0) {
                        return Ok(None);
                    }
                    Affine {
                        scale: k.iter().map(|v| 1.0 / v).collect(),
                        shift: zeros,
                    }
                }
            };
            Ok(Some((x, a)))
        }
        _ => Ok(None),
    }
}

fn try_fold(g: &mut Graph, id: NodeId) -> Result<Outcome, GraphError> {
    let node = g.node(id);
    if !matches!(node.op, Op::BatchNormalization { .. } | Op::Binary(_)) {
        return Ok(Outcome::NotApplicable);
    }
    // The producer must be a foldable contraction whose result only feeds us.
    let candidates: Vec<ValueId> = node.inputs.clone();
    let foldable = candidates.iter().any(|&x| {
        let p = g.node(g.value(x).producer);
        let op_ok = match &p.op {
            // Per-channel affines broadcast over NCHW results only.
            Op::Conv2d(c) => c.data == dnnc_ir::op::DataLayout::Nchw,
            Op::Gemm(_) => g.value(x).ty.rank() == 2,
            _ => false,
        };
        let weights_ok = p.inputs.iter().skip(1).all(|&v| is_weight(g, v));
        op_ok && weights_ok && g.users(x).len() == 1 && !g.outputs().contains(&x)
    });
    if !foldable {
        return Ok(Outcome::NotApplicable);
    }
    let y = node.outputs[0];
    let what = format!("%{}", g.value(y).name);
    let (x, affine) = match affine_of(g, id) {
        Ok(Some(a)) => a,
        Ok(None) => return Ok(Outcome::NotApplicable),
        Err(e) => return Ok(Outcome::Skipped(format!("{what} not folded: {e}"))),
    };
    let p = g.value(x).producer;
    if !candidates.contains(&x) || g.users(x).len() != 1 || g.outputs().contains(&x) {
        return Ok(Outcome::NotApplicable);
    }
    let pnode = g.node(p).clone();
    let new = match &pnode.op {
        Op::Conv2d(_) => fold_conv(g, &pnode, &affine),
        Op::Gemm(gemm) => fold_gemm(g, &pnode, gemm, &affine),
        _ => return Ok(Outcome::NotApplicable),
    };
    let (op, w, b) = match new {
        Ok(Some(n)) => n,
        Ok(None) => return Ok(Outcome::NotApplicable),
        Err(e) => return Ok(Outcome::Skipped(format!("{what} not folded: {e}"))),
    };
    let w_name = fresh(g, &pnode.inputs[1], "");
    let b_name = match pnode.inputs.get(2) {
        Some(v) => fresh(g, v, ""),
        None => fresh(g, &x, ".bias"),
    };
    let wv = add_weight(g, &w_name, w)?;
    let bv = add_weight(g, &b_name, b)?;
    g.rewrite_node(p, op, &[pnode.inputs[0], wv, bv])?;
    let out_name = g.value(y).name.clone();
    let was_output = g.outputs().contains(&y);
    g.replace_all_uses(y, x)?;
    let old_inputs = g.node(id).inputs.clone();
    g.remove_node(id)?;
    if was_output {
        g.rename_value(x, &out_name)?;
    }
    for v in old_inputs
        .into_iter()
        .chain(pnode.inputs.iter().skip(1).copied())
    {
        let src = g.value(v).producer;
        if g.dag().contains_node(src)
            && is_weight(g, v)
            && g.users(v).is_empty()
            && !g.outputs().contains(&v)
        {
            g.remove_node(src)?;
        }
    }
    Ok(Outcome::Folded)
}

/// A fresh name `<stem><suffix>.fold` for a folded weight of `v`
/// ([`crate::tagged_name`]).
fn fresh(g: &Graph, v: &ValueId, suffix: &str) -> String {
    crate::tagged_name(g, &g.value(*v).name, suffix, "fold")
}

fn add_weight(g: &mut Graph, name: &str, a: ArrayD<f64>) -> Result<ValueId, GraphError> {
    let t = Tensor::F32(a.mapv(|v| v as f32));
    let v = g.add_param(name, t.ty(), Init::External(name.to_string()))?;
    g.weights.insert(name, t);
    Ok(v)
}

type Folded = (Op, ArrayD<f64>, ArrayD<f64>);

fn fold_conv(g: &Graph, conv: &dnnc_ir::Node, a: &Affine) -> Result<Option<Folded>, String> {
    let mut w = weight_f64(g, conv.inputs[1])?;
    let m = w.shape()[0];
    if m != a.scale.len() {
        return Ok(None);
    }
    let b = match conv.inputs.get(2) {
        Some(&v) => weight_f64(g, v)?,
        None => ArrayD::zeros(IxDyn(&[m])),
    };
    for (i, mut row) in w.axis_iter_mut(Axis(0)).enumerate() {
        row.mapv_inplace(|v| v * a.scale[i]);
    }
    let b = ArrayD::from_shape_fn(IxDyn(&[m]), |ix| {
        b[[ix[0]]] * a.scale[ix[0]] + a.shift[ix[0]]
    });
    Ok(Some((conv.op.clone(), w, b)))
}

fn fold_gemm(
    g: &Graph,
    node: &dnnc_ir::Node,
    gemm: &Gemm,
    a: &Affine,
) -> Result<Option<Folded>, String> {
    let n = a.scale.len();
    let mut w = weight_f64(g, node.inputs[1])?;
    let axis = if gemm.trans_b { 0 } else { 1 };
    if w.ndim() != 2 || w.shape()[axis] != n {
        return Ok(None);
    }
    // beta·C as one value per output column; C varying along rows is not
    // per-channel and cannot be folded.
    let c = match node.inputs.get(2) {
        Some(&v) => match per_channel(&weight_f64(g, v)?, 2, n) {
            Some(c) if g.value(v).ty.rank() < 2 || g.value(v).ty.shape[0] == 1 => c,
            _ => return Ok(None),
        },
        None => vec![0.0; n],
    };
    for (i, mut col) in w.axis_iter_mut(Axis(axis)).enumerate() {
        col.mapv_inplace(|v| v * a.scale[i]);
    }
    let beta = f64::from(gemm.beta);
    let b = ArrayD::from_shape_fn(IxDyn(&[n]), |ix| {
        let i = ix[0];
        beta * c[i] * a.scale[i] + a.shift[i]
    });
    let op = Op::Gemm(Gemm {
        beta: 1.0,
        ..gemm.clone()
    });
    Ok(Some((op, w, b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_inputs::run;
    use dnnc_ir::text::{parse, print};

    fn assert_close(a: &[Tensor], b: &[Tensor]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            let (x, y) = (x.as_f32().unwrap(), y.as_f32().unwrap());
            assert_eq!(x.shape(), y.shape());
            for (p, q) in x.iter().zip(y) {
                assert!(
                    (p - q).abs() <= 1e-4 * q.abs().max(1e-1),
                    "{p} vs {q} (rtol 1e-4)"
                );
            }
        }
    }

    /// Folds, verifies, checks the interpreter agrees; returns the stats.
    fn fold_checked(g: &mut Graph) -> PassStats {
        let before = run(g);
        let stats = FoldBatchNorm.run(g).unwrap();
        dnnc_ir::verify(g).unwrap();
        assert_close(&run(g), &before);
        stats
    }

    const SMALL: &str = "graph small {
      input %x: f32[1,3,8,8]
      param %c1.w: f32[4,3,3,3] = he(seed=1)
      param %c1.b: f32[4] = uniform(low=-0.5, high=0.5, seed=2)
      param %bn.g: f32[4] = uniform(low=0.5, high=1.5, seed=3)
      param %bn.b: f32[4] = uniform(low=-0.5, high=0.5, seed=4)
      param %bn.m: f32[4] = uniform(low=-0.5, high=0.5, seed=5)
      param %bn.v: f32[4] = uniform(low=0.5, high=1.5, seed=6)
      %c1 = Conv2d(%x, %c1.w, %c1.b) {pads=[1,1,1,1]}
      %bn = BatchNormalization(%c1, %bn.g, %bn.b, %bn.m, %bn.v)
      %r = Relu(%bn)
      output %r
    }";

    #[test]
    fn snapshot_conv_bn() {
        let mut g = parse(SMALL, "small.dnn").unwrap();
        let before = print(&g);
        let stats = fold_checked(&mut g);
        insta::assert_snapshot!(format!(
            "{before}--- fold-batchnorm ({} rewrites) --->\n{}",
            stats.rewrites,
            print(&g)
        ));
    }

    #[test]
    fn folds_chains_grouped_convs_gemm_and_keeps_output_names() {
        let mut g = parse(
            "graph chain {
              input %x: f32[2,4,6,6]
              param %w: f32[6,2,3,3] = he(seed=1)
              param %g: f32[6] = uniform(low=0.5, high=1.5, seed=3)
              param %b: f32[6] = uniform(low=-0.5, high=0.5, seed=4)
              param %m: f32[6] = uniform(low=-0.5, high=0.5, seed=5)
              param %v: f32[6] = uniform(low=0.5, high=1.5, seed=6)
              const %k: f32[6,1,1] = [1.5, -2, 0.25, 3, 1, -0.5]
              const %a: f32[1,6,1,1] = [0.1, 0.2, 0.3, -0.4, 0.5, 0.6]
              %c = Conv2d(%x, %w) {group=2, strides=[2,2]}
              %bn = BatchNormalization(%c, %g, %b, %m, %v)
              %mul = Mul(%k, %bn)
              %add = Add(%mul, %a)
              %div = Div(%add, %k)
              %sub = Sub(%div, %a)
              %pool = GlobalAveragePool(%sub)
              %flat = Flatten(%pool)
              param %fw: f32[5,6] = xavier(seed=9)
              param %fb: f32[5] = uniform(low=-0.5, high=0.5, seed=10)
              %fc = Gemm(%flat, %fw, %fb) {transB=1, beta=0.5}
              param %g2: f32[5] = uniform(low=0.5, high=1.5, seed=13)
              param %b2: f32[5] = uniform(low=-0.5, high=0.5, seed=14)
              param %m2: f32[5] = uniform(low=-0.5, high=0.5, seed=15)
              param %v2: f32[5] = uniform(low=0.5, high=1.5, seed=16)
              %out = BatchNormalization(%fc, %g2, %b2, %m2, %v2)
              output %out
            }",
            "chain.dnn",
        )
        .unwrap();
        let stats = fold_checked(&mut g);
        assert_eq!(stats.rewrites, 6, "{}", print(&g));
        let text = print(&g);
        assert!(!text.contains("BatchNormalization"), "{text}");
        assert!(!text.contains("Mul("), "{text}");
        assert!(
            text.contains("%out: f32[2,5] = Gemm(%flat, %fw.fold, %fb.fold)"),
            "{text}"
        );
        assert_eq!(g.value(g.outputs()[0]).name, "out");
    }

    #[test]
    fn gemm_without_trans_b_and_without_bias() {
        let mut g = parse(
            "graph g {
              input %x: f32[3,4]
              param %w: f32[4,5] = xavier(seed=1)
              const %s: f32[5] = [1, 2, 3, 4, 5]
              %y = Gemm(%x, %w) {alpha=2}
              %z = Mul(%y, %s)
              %o = Relu(%z)
              output %o
            }",
            "g.dnn",
        )
        .unwrap();
        assert_eq!(fold_checked(&mut g).rewrites, 1);
        assert!(print(&g).contains("Gemm(%x, %w.fold, %y.bias.fold)"));
    }

    #[test]
    fn shared_outputs_and_non_channel_constants_are_left_alone() {
        let src = "graph keep {
          input %x: f32[1,2,4,4]
          param %w: f32[2,2,1,1] = he(seed=1)
          const %row: f32[4] = [1, 2, 3, 4]
          %c = Conv2d(%x, %w)
          %m = Mul(%c, %row)
          %c2 = Conv2d(%x, %w)
          %a = Add(%c2, %row)
          %r = Relu(%c2)
          %d = Sub(%row, %c)
          output %m, %a, %r, %d
        }";
        let mut g = parse(src, "keep.dnn").unwrap();
        let before = print(&g);
        assert_eq!(fold_checked(&mut g).rewrites, 0);
        assert_eq!(print(&g), before);
    }

    #[test]
    fn unbound_external_weights_are_skipped_with_a_note() {
        let mut g = parse(
            &SMALL.replace(
                "param %bn.v: f32[4] = uniform(low=0.5, high=1.5, seed=6)",
                "param %bn.v: f32[4]",
            ),
            "ext.dnn",
        )
        .unwrap();
        let stats = FoldBatchNorm.run(&mut g).unwrap();
        assert_eq!(stats.rewrites, 0);
        assert_eq!(stats.notes.len(), 1, "{:?}", stats.notes);
        assert!(stats.notes[0].contains("bn.v"), "{:?}", stats.notes);
    }

    #[test]
    fn shared_weight_param_is_not_mutated() {
        let mut g = parse(
            &SMALL.replace(
                "output %r",
                "%c2 = Conv2d(%x, %c1.w, %c1.b) {pads=[1,1,1,1]}\n output %r, %c2",
            ),
            "shared.dnn",
        )
        .unwrap();
        let w = g
            .weight(g.value_by_name("c1.w").unwrap())
            .unwrap()
            .into_owned();
        assert_eq!(fold_checked(&mut g).rewrites, 1);
        let c1w = g.value_by_name("c1.w").unwrap();
        assert_eq!(*g.weight(c1w).unwrap(), w);
        assert!(print(&g).contains("Conv2d(%x, %c1.w.fold, %c1.b.fold)"));
    }

    /// ResNet-18 before and after folding agree on the interpreter. Slow in
    /// debug builds; `.ci/run` runs ignored tests in release.
    #[test]
    #[ignore]
    fn resnet18_folds_every_batchnorm() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/resnet18.dnn"
        ))
        .unwrap();
        let mut g = parse(&src, "resnet18.dnn").unwrap();
        let stats = fold_checked(&mut g);
        assert_eq!(stats.rewrites, 20);
        assert!(!print(&g).contains("BatchNormalization"));
    }
}
