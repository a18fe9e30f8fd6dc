//! `fold-weights`: nodes computed from parameters and constants alone are
//! evaluated once, here, and become parameters holding the result — the
//! compile-time folding the e-graph's cost model assumes when it prices a
//! weights-only node at nothing. Covers the ops exporters and rewrites
//! put on weights: views, Transpose, Concat, Identity/Dropout,
//! ConstantOfShape, and f32
//! elementwise Relu, Neg, Abs, Sqrt, Exp, Log, Reciprocal, Sigmoid, Tanh
//! and Add, Sub, Mul, Div with numpy broadcasting. Anything else on
//! weights is left to run (a note names it). A folded value keeps its
//! name; a graph output is left as it is. Parameters and constants
//! nothing reads after the folds are deleted.

use crate::pipeline::{Pass, PassError, PassStats};
use dnnc_ir::op::{Binary, Unary};
use dnnc_ir::{Graph, GraphError, Init, Op, OpClass, Tensor};
use ndarray::{ArrayD, Axis, IxDyn};

/// The `fold-weights` pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct FoldWeights;

impl Pass for FoldWeights {
    fn name(&self) -> &'static str {
        "fold-weights"
    }
    fn description(&self) -> &'static str {
        "evaluate nodes computed from weights alone once, at compile time, into parameters"
    }
    fn run(&self, g: &mut Graph) -> Result<PassStats, PassError> {
        let err = |e| PassError::graph("fold-weights", e);
        let mut stats = PassStats::default();
        let mut weight = vec![false; g.value_count()];
        for id in g.topo_order() {
            let node = g.node(id).clone();
            if matches!(node.op, Op::Param(_) | Op::Constant) {
                weight[node.outputs[0].index()] = true;
                continue;
            }
            let generated = matches!(node.op, Op::ConstantOfShape { .. });
            if node.op.class() == OpClass::Source
                || (node.inputs.is_empty() && !generated)
                || node.outputs.len() != 1
                || !node
                    .inputs
                    .iter()
                    .all(|v| weight.get(v.index()).copied().unwrap_or(false))
            {
                continue;
            }
            let out = node.outputs[0];
            if g.outputs().contains(&out) {
                continue;
            }
            let ins: Result<Vec<Tensor>, GraphError> = node
                .inputs
                .iter()
                .map(|&v| g.weight(v).map(|t| t.into_owned()))
                .collect();
            let ins = ins.map_err(err)?;
            let want = g.value(out).ty.clone();
            let Some(t) = eval(&node.op, &ins, &want.shape) else {
                stats.notes.push(format!(
                    "{} `%{}` on weights is left to run (no compile-time evaluation for it)",
                    node.op.name(),
                    g.value(out).name
                ));
                continue;
            };
            if t.ty() != want {
                continue;
            }
            let name = g.value(out).name.clone();
            let tmp = fresh(g, &name);
            // External data under the final name: after the rename the
            // parameter reads its own name's tensor.
            let nv = g
                .add_param(&tmp, want, Init::External(name.clone()))
                .map_err(err)?;
            g.weights.insert(tmp.clone(), t);
            g.replace_all_uses(out, nv).map_err(err)?;
            g.remove_node(id).map_err(err)?;
            g.rename_value(nv, &name).map_err(err)?;
            weight.resize(g.value_count(), false);
            weight[nv.index()] = true;
            stats.rewrites += 1;
        }
        if stats.rewrites > 0 {
            // Weights the folds consumed (intermediate results included)
            // are read by nothing now.
            for id in g.topo_order() {
                let node = g.node(id);
                if matches!(node.op, Op::Param(_) | Op::Constant)
                    && node
                        .outputs
                        .iter()
                        .all(|&v| g.users(v).is_empty() && !g.outputs().contains(&v))
                {
                    g.remove_node(id).map_err(err)?;
                }
            }
        }
        Ok(stats)
    }
}

fn fresh(g: &Graph, name: &str) -> String {
    let mut n = 1;
    loop {
        let c = format!("{name}.folding{n}");
        if g.value_by_name(&c).is_none() {
            return c;
        }
        n += 1;
    }
}

/// `op` on the f32 tensors `ins`, giving a tensor of shape `out`, or
/// `None` when this pass does not evaluate it.
fn eval(op: &Op, ins: &[Tensor], out: &[usize]) -> Option<Tensor> {
    if let Op::ConstantOfShape {
        value: dnnc_ir::op::Scalar::F32(v),
        ..
    } = op
    {
        return Some(Tensor::F32(ArrayD::from_elem(IxDyn(out), *v)));
    }
    let f: Vec<&ArrayD<f32>> = ins.iter().map(|t| t.as_f32()).collect::<Option<_>>()?;
    let r: ArrayD<f32> = match op {
        Op::Identity | Op::Dropout { .. } => f[0].clone(),
        Op::Reshape { .. } | Op::Flatten { .. } | Op::Squeeze { .. } | Op::Unsqueeze { .. } => {
            let v: Vec<f32> = f[0].iter().copied().collect();
            ArrayD::from_shape_vec(IxDyn(out), v).ok()?
        }
        Op::Transpose { perm } => f[0]
            .clone()
            .permuted_axes(IxDyn(perm))
            .as_standard_layout()
            .to_owned(),
        Op::Concat { axis } => {
            let ax = dnnc_ir::infer::norm_axis(*axis, f[0].ndim()).ok()?;
            let views: Vec<_> = f.iter().map(|a| a.view()).collect();
            ndarray::concatenate(Axis(ax), &views).ok()?
        }
        Op::Pad {
            pads,
            mode: dnnc_ir::op::PadMode::Constant,
            value,
        } => {
            let r = f[0].ndim();
            if pads.len() != 2 * r || pads.iter().any(|&p| p < 0) {
                return None;
            }
            let mut y = ArrayD::from_elem(IxDyn(out), *value);
            let inner: Vec<ndarray::SliceInfoElem> = (0..r)
                .map(|a| {
                    let b = pads[a] as isize;
                    ndarray::SliceInfoElem::Slice {
                        start: b,
                        end: Some(b + f[0].shape()[a] as isize),
                        step: 1,
                    }
                })
                .collect();
            y.slice_mut(inner.as_slice()).assign(f[0]);
            y
        }
        Op::Unary(u) => {
            let g: fn(f32) -> f32 = match u {
                Unary::Relu => |x| if x > 0.0 { x } else { 0.0 },
                Unary::Neg => |x| -x,
                Unary::Abs => f32::abs,
                Unary::Sqrt => f32::sqrt,
                Unary::Exp => f32::exp,
                Unary::Log => f32::ln,
                Unary::Reciprocal => |x| 1.0 / x,
                Unary::Sigmoid => |x| 1.0 / (1.0 + (-x).exp()),
                Unary::Tanh => f32::tanh,
                _ => return None,
            };
            f[0].mapv(g)
        }
        Op::Binary(b) => {
            let h: fn(f32, f32) -> f32 = match b {
                Binary::Add => |x, y| x + y,
                Binary::Sub => |x, y| x - y,
                Binary::Mul => |x, y| x * y,
                Binary::Div => |x, y| x / y,
                _ => return None,
            };
            let a = f[0].broadcast(IxDyn(out))?;
            let c = f[1].broadcast(IxDyn(out))?;
            ndarray::Zip::from(&a).and(&c).map_collect(|&x, &y| h(x, y))
        }
        _ => return None,
    };
    Some(Tensor::F32(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dnnc_ir::text::{parse, print};

    /// A transposed, reshaped and scaled weight folds into one parameter
    /// under the last name; the conv reads it; the outputs match the
    /// interpreter's on the unfolded graph.
    #[test]
    fn weight_expressions_fold_into_parameters() {
        let src = "graph t {
               input %x: f32[1,4,6,6]
               param %w: f32[3,3,4,8] = he(seed=1)
               %wt = Transpose(%w) {perm=[3,2,0,1]}
               param %s: f32[8,1,1,1] = uniform(low=0.5, high=1.5, seed=2)
               %ws = Mul(%wt, %s)
               %y = Conv2d(%x, %ws) {pads=[1,1,1,1]}
               %r = Relu(%y)
               output %r
             }";
        let g = parse(src, "t.dnn").unwrap();
        let mut f = g.clone();
        let stats = FoldWeights.run(&mut f).unwrap();
        dnnc_ir::verify(&f).unwrap();
        assert_eq!(stats.rewrites, 2, "{:?}", stats.notes);
        let text = print(&f);
        assert!(
            !text.contains("Transpose") && !text.contains("Mul"),
            "{text}"
        );
        assert!(text.contains("param %ws: f32[8,4,3,3]"), "{text}");
        let x = vec![(
            "x".to_string(),
            Tensor::F32(
                Init::Normal {
                    mean: 0.0,
                    std: 1.0,
                    seed: 3,
                }
                .materialize(&g.value(g.inputs()[0]).ty)
                .unwrap(),
            ),
        )];
        let a = dnnc_runtime::run(&g, &x).unwrap();
        let b = dnnc_runtime::run(&f, &x).unwrap();
        for (p, q) in a[0]
            .as_f32()
            .unwrap()
            .iter()
            .zip(b[0].as_f32().unwrap().iter())
        {
            assert!((p - q).abs() <= 1e-5 * p.abs().max(1.0), "{p} vs {q}");
        }
    }

    /// Ops it does not evaluate stay, with a note; inputs never fold.
    #[test]
    fn unevaluated_ops_and_inputs_stay() {
        let mut g = parse(
            "graph t {
               input %x: f32[2,3]
               param %w: f32[2,3] = ones
               %e = Erf(%w)
               %a = Add(%x, %e)
               output %a
             }",
            "t.dnn",
        )
        .unwrap();
        let stats = FoldWeights.run(&mut g).unwrap();
        assert_eq!(stats.rewrites, 0);
        assert!(
            stats.notes.iter().any(|n| n.contains("Erf `%e`")),
            "{:?}",
            stats.notes
        );
    }
}
