//! Import-time evaluation of constant subgraphs. IR ops run on the
//! reference interpreter (`dnnc_runtime::run`, the numeric oracle) over a
//! one-node scratch graph; the few ONNX ops that exist only to compute
//! shapes (`Cast`, `Equal`, `Where`, `Range`...) are evaluated here.

use dnnc_ir::infer::broadcast_shapes;
use dnnc_ir::{Graph, GraphError, Op, Tensor};
use ndarray::{ArrayD, IxDyn};

/// Folded results larger than this many elements are left in the graph as
/// ops, so import never materialises a huge constant.
pub(crate) const FOLD_LIMIT: usize = 1 << 22;

/// Outcome of trying to evaluate an IR op on constants.
pub(crate) enum Folded {
    /// The op's results.
    Done(Vec<Tensor>),
    /// Not folded (too large, or the interpreter declined); the reason is
    /// kept for error messages that need the value to be constant.
    Declined(String),
}

/// Evaluates `op` on constant inputs with the reference interpreter. A
/// `GraphError` means the op is ill-typed on these inputs (the same error
/// the real graph would raise).
pub(crate) fn fold_ir(op: &Op, inputs: &[&Tensor]) -> Result<Folded, GraphError> {
    let mut g = Graph::new("fold");
    let mut ids = Vec::with_capacity(inputs.len());
    let mut feeds = Vec::with_capacity(inputs.len());
    for (i, t) in inputs.iter().enumerate() {
        let name = format!("in{i}");
        ids.push(g.add_input(&name, t.ty())?);
        feeds.push((name, (*t).clone()));
    }
    let names: Vec<String> = (0..op.num_outputs()).map(|i| format!("out{i}")).collect();
    let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
    let outs = g.add_node(op.clone(), &ids, &refs)?;
    let total: u128 = outs
        .iter()
        .map(|&v| {
            g.value(v)
                .ty
                .shape
                .iter()
                .fold(1u128, |a, &d| a.saturating_mul(d as u128))
        })
        .fold(0u128, |a, n| a.saturating_add(n));
    if total > FOLD_LIMIT as u128 {
        return Ok(Folded::Declined(format!(
            "its constant result would have {total} elements, more than dnnc folds at import"
        )));
    }
    g.set_outputs(outs);
    match dnnc_runtime::run(&g, &feeds) {
        Ok(ts) => Ok(Folded::Done(ts)),
        Err(e) => Ok(Folded::Declined(format!(
            "evaluating it at import failed: {e}"
        ))),
    }
}

/// Numpy-broadcasts `a` to `shape`.
fn bcast<T: Clone>(a: &ArrayD<T>, shape: &[usize]) -> Result<ArrayD<T>, String> {
    a.broadcast(IxDyn(shape))
        .map(|v| v.to_owned())
        .ok_or_else(|| format!("shape {:?} does not broadcast to {shape:?}", a.shape()))
}

/// ONNX `Equal` on two constants of one dtype.
pub(crate) fn equal(a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let out: Vec<bool> = match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => zip_eq(&bcast(x, &shape)?, &bcast(y, &shape)?),
        (Tensor::I64(x), Tensor::I64(y)) => zip_eq(&bcast(x, &shape)?, &bcast(y, &shape)?),
        (Tensor::Bool(x), Tensor::Bool(y)) => zip_eq(&bcast(x, &shape)?, &bcast(y, &shape)?),
        _ => {
            return Err(format!(
                "operand dtypes differ: {} vs {}",
                a.dtype(),
                b.dtype()
            ))
        }
    };
    ArrayD::from_shape_vec(IxDyn(&shape), out)
        .map(Tensor::Bool)
        .map_err(|e| e.to_string())
}

fn zip_eq<T: PartialEq>(x: &ArrayD<T>, y: &ArrayD<T>) -> Vec<bool> {
    x.iter().zip(y.iter()).map(|(p, q)| p == q).collect()
}

/// ONNX `Mod` on two constants of one dtype: with `fmod` false (ONNX's
/// default, integers only) the remainder takes the divisor's sign, as
/// Python's `%`; with `fmod` true, the dividend's, as C's `fmod` (which
/// floats require). An integer divisor of zero is an error.
pub(crate) fn modulo(a: &Tensor, b: &Tensor, fmod: bool) -> Result<Tensor, String> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let sh = IxDyn(&shape);
    let r = match (a, b) {
        (Tensor::I64(x), Tensor::I64(y)) => {
            let (x, y) = (bcast(x, &shape)?, bcast(y, &shape)?);
            let v = x
                .iter()
                .zip(y.iter())
                .map(|(&p, &q)| match (q, fmod) {
                    (0, _) => Err(format!("integer modulus by zero ({p} mod 0)")),
                    (_, true) => Ok(p.wrapping_rem(q)),
                    (_, false) => {
                        let r = p.wrapping_rem(q);
                        Ok(if r != 0 && (r < 0) != (q < 0) {
                            r + q
                        } else {
                            r
                        })
                    }
                })
                .collect::<Result<Vec<i64>, String>>()?;
            ArrayD::from_shape_vec(sh, v).map(Tensor::I64)
        }
        (Tensor::F32(x), Tensor::F32(y)) => {
            if !fmod {
                return Err("a floating-point Mod needs fmod=1".into());
            }
            let (x, y) = (bcast(x, &shape)?, bcast(y, &shape)?);
            let v = x.iter().zip(y.iter()).map(|(&p, &q)| p % q).collect();
            ArrayD::from_shape_vec(sh, v).map(Tensor::F32)
        }
        _ => {
            return Err(format!(
                "Mod takes two f32 or two int64 operands, found {} and {}",
                a.dtype(),
                b.dtype()
            ))
        }
    };
    r.map_err(|e| e.to_string())
}

/// ONNX `Where` on constants.
pub(crate) fn where_(c: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor, String> {
    let Tensor::Bool(c) = c else {
        return Err(format!("condition must be bool, found {}", c.dtype()));
    };
    let shape = broadcast_shapes(&broadcast_shapes(c.shape(), x.shape())?, y.shape())?;
    let c = bcast(c, &shape)?;
    fn pick<T: Clone>(c: &ArrayD<bool>, x: &ArrayD<T>, y: &ArrayD<T>) -> Vec<T> {
        c.iter()
            .zip(x.iter().zip(y.iter()))
            .map(|(&c, (a, b))| if c { a.clone() } else { b.clone() })
            .collect()
    }
    let sh = IxDyn(&shape);
    let r = match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => {
            ArrayD::from_shape_vec(sh, pick(&c, &bcast(a, &shape)?, &bcast(b, &shape)?))
                .map(Tensor::F32)
        }
        (Tensor::I64(a), Tensor::I64(b)) => {
            ArrayD::from_shape_vec(sh, pick(&c, &bcast(a, &shape)?, &bcast(b, &shape)?))
                .map(Tensor::I64)
        }
        (Tensor::Bool(a), Tensor::Bool(b)) => {
            ArrayD::from_shape_vec(sh, pick(&c, &bcast(a, &shape)?, &bcast(b, &shape)?))
                .map(Tensor::Bool)
        }
        _ => {
            return Err(format!(
                "X and Y dtypes differ: {} vs {}",
                x.dtype(),
                y.dtype()
            ))
        }
    };
    r.map_err(|e| e.to_string())
}

/// Converts a constant to another dtype (ONNX `Cast` semantics: float to
/// int truncates toward zero, nonzero is true).
pub(crate) fn cast(t: &Tensor, to: dnnc_ir::DType) -> Tensor {
    use dnnc_ir::DType;
    match (t, to) {
        (Tensor::F32(a), DType::F32) => Tensor::F32(a.clone()),
        (Tensor::F32(a), DType::I64) => Tensor::I64(a.mapv(|v| v as i64)),
        (Tensor::F32(a), DType::Bool) => Tensor::Bool(a.mapv(|v| v != 0.0)),
        (Tensor::I64(a), DType::F32) => Tensor::F32(a.mapv(|v| v as f32)),
        (Tensor::I64(a), DType::I64) => Tensor::I64(a.clone()),
        (Tensor::I64(a), DType::Bool) => Tensor::Bool(a.mapv(|v| v != 0)),
        (Tensor::Bool(a), DType::F32) => Tensor::F32(a.mapv(|v| v as i64 as f32)),
        (Tensor::Bool(a), DType::I64) => Tensor::I64(a.mapv(|v| v as i64)),
        (Tensor::Bool(a), DType::Bool) => Tensor::Bool(a.clone()),
    }
}

/// ONNX `Range` on scalar constants.
pub(crate) fn range(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Tensor, String> {
    let scalar = |t: &Tensor| -> Result<(), String> {
        if t.numel() == 1 && t.shape().len() <= 1 {
            Ok(())
        } else {
            Err(format!(
                "inputs must be scalars, found shape {:?}",
                t.shape()
            ))
        }
    };
    scalar(start)?;
    scalar(limit)?;
    scalar(delta)?;
    match (start, limit, delta) {
        (Tensor::I64(s), Tensor::I64(l), Tensor::I64(d)) => {
            let (s, l, d) = (
                s.iter().next().copied().unwrap_or(0),
                l.iter().next().copied().unwrap_or(0),
                d.iter().next().copied().unwrap_or(0),
            );
            if d == 0 {
                return Err("delta is 0".into());
            }
            let n = ((l as i128 - s as i128) + d as i128 - d.signum() as i128) / d as i128;
            let n = n.max(0) as u128;
            if n > FOLD_LIMIT as u128 {
                return Err(format!("the range has {n} elements"));
            }
            let v: Vec<i64> = (0..n as i64)
                .map(|i| s.wrapping_add(i.wrapping_mul(d)))
                .collect();
            Ok(Tensor::I64(
                ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).map_err(|e| e.to_string())?,
            ))
        }
        (Tensor::F32(s), Tensor::F32(l), Tensor::F32(d)) => {
            let (s, l, d) = (
                s.iter().next().copied().unwrap_or(0.0),
                l.iter().next().copied().unwrap_or(0.0),
                d.iter().next().copied().unwrap_or(0.0),
            );
            let n = ((l - s) / d).ceil();
            if !n.is_finite() {
                return Err("the range is not finite".into());
            }
            let n = n.max(0.0) as usize;
            if n > FOLD_LIMIT {
                return Err(format!("the range has {n} elements"));
            }
            let v: Vec<f32> = (0..n).map(|i| s + i as f32 * d).collect();
            Ok(Tensor::F32(
                ArrayD::from_shape_vec(IxDyn(&[n]), v).map_err(|e| e.to_string())?,
            ))
        }
        _ => Err("start, limit and delta must share one dtype (f32 or i64)".into()),
    }
}

/// ONNX `ConstantOfShape`: a tensor of `shape` filled with `value`'s only
/// element.
pub(crate) fn constant_of_shape(shape: &[i64], value: &Tensor) -> Result<Tensor, String> {
    let mut dims = Vec::with_capacity(shape.len());
    let mut n: u128 = 1;
    for &d in shape {
        if d < 0 {
            return Err(format!("shape {shape:?} has a negative dimension"));
        }
        n = n.saturating_mul(d as u128);
        dims.push(d as usize);
    }
    if n > FOLD_LIMIT as u128 {
        return Err(format!("the result would have {n} elements"));
    }
    let sh = IxDyn(&dims);
    Ok(match value {
        Tensor::F32(a) => Tensor::F32(ArrayD::from_elem(
            sh,
            a.iter().next().copied().unwrap_or(0.0),
        )),
        Tensor::I64(a) => Tensor::I64(ArrayD::from_elem(sh, a.iter().next().copied().unwrap_or(0))),
        Tensor::Bool(a) => Tensor::Bool(ArrayD::from_elem(
            sh,
            a.iter().next().copied().unwrap_or(false),
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(v: &[i64]) -> Tensor {
        Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap())
    }

    fn s(v: i64) -> Tensor {
        Tensor::I64(ArrayD::from_elem(IxDyn(&[]), v))
    }

    #[test]
    fn range_matches_onnx_examples() {
        assert_eq!(range(&s(3), &s(9), &s(3)).unwrap(), i(&[3, 6]));
        assert_eq!(range(&s(10), &s(4), &s(-3)).unwrap(), i(&[10, 7]));
        assert_eq!(range(&s(0), &s(0), &s(1)).unwrap().numel(), 0);
        assert!(range(&s(0), &s(5), &s(0)).is_err());
    }

    #[test]
    fn equal_where_cast_broadcast() {
        let e = equal(&i(&[1, 2, 3]), &s(2)).unwrap();
        assert_eq!(
            e.as_bool().unwrap().iter().copied().collect::<Vec<_>>(),
            vec![false, true, false]
        );
        let w = where_(&e, &s(-1), &i(&[7, 8, 9])).unwrap();
        assert_eq!(w, i(&[7, -1, 9]));
        assert_eq!(cast(&e, dnnc_ir::DType::I64), i(&[0, 1, 0]));
        assert!(where_(&i(&[1]), &s(1), &s(2)).is_err());
    }

    #[test]
    fn constant_of_shape_fills_and_bounds() {
        let t = constant_of_shape(&[2, 3], &s(7)).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert!(constant_of_shape(&[1 << 30, 1 << 30], &s(0)).is_err());
        assert!(constant_of_shape(&[-1], &s(0)).is_err());
    }
}
