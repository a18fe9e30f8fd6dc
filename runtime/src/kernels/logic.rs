//! Comparisons, boolean logic, `Where` and `Cast`: the ops that produce or
//! consume bool masks. Broadcasting follows numpy.

use super::KResult;
use dnnc_ir::infer::broadcast_shapes;
use dnnc_ir::op::{Compare, Logical};
use dnnc_ir::{DType, Tensor};
use ndarray::{ArrayD, IxDyn, Zip};

/// `f` over the numpy broadcast of `a` and `b`, into a new array.
fn zip2<A: Copy, B: Copy, T>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    f: impl Fn(A, B) -> T,
) -> KResult<ArrayD<T>> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let bad = |s: &[usize]| format!("cannot broadcast {s:?} to {shape:?}");
    let av = a.broadcast(IxDyn(&shape)).ok_or_else(|| bad(a.shape()))?;
    let bv = b.broadcast(IxDyn(&shape)).ok_or_else(|| bad(b.shape()))?;
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

/// Equal / Less / Greater to a bool tensor. f32 comparisons follow IEEE
/// (NaN compares unequal and unordered).
pub(crate) fn compare(a: &Tensor, b: &Tensor, k: Compare) -> KResult<Tensor> {
    fn cmp<T: Copy + PartialOrd>(
        x: &ArrayD<T>,
        y: &ArrayD<T>,
        k: Compare,
    ) -> KResult<ArrayD<bool>> {
        match k {
            Compare::Equal => zip2(x, y, |a, b| a == b),
            Compare::Less => zip2(x, y, |a, b| a < b),
            Compare::Greater => zip2(x, y, |a, b| a > b),
        }
    }
    Ok(Tensor::Bool(match (a, b) {
        (Tensor::F32(x), Tensor::F32(y)) => cmp(x, y, k)?,
        (Tensor::I64(x), Tensor::I64(y)) => cmp(x, y, k)?,
        (Tensor::Bool(x), Tensor::Bool(y)) if k == Compare::Equal => cmp(x, y, k)?,
        _ => {
            return Err(format!(
                "operands must share a dtype (f32 or i64; bool for Equal), found {} and {}",
                a.ty(),
                b.ty()
            ))
        }
    }))
}

/// Elementwise And / Or of two bool tensors.
pub(crate) fn logical(a: &Tensor, b: &Tensor, k: Logical) -> KResult<Tensor> {
    let (Some(x), Some(y)) = (a.as_bool(), b.as_bool()) else {
        return Err(format!(
            "operands must be bool, found {} and {}",
            a.ty(),
            b.ty()
        ));
    };
    Ok(Tensor::Bool(match k {
        Logical::And => zip2(x, y, |a, b| a && b)?,
        Logical::Or => zip2(x, y, |a, b| a || b)?,
    }))
}

/// Boolean negation, in place.
pub(crate) fn not(t: Tensor) -> KResult<Tensor> {
    match t {
        Tensor::Bool(mut a) => {
            a.mapv_inplace(|v| !v);
            Ok(Tensor::Bool(a))
        }
        other => Err(format!("input must be bool, found {}", other.ty())),
    }
}

/// `cond ? x : y`, all three broadcast together.
pub(crate) fn where_(cond: &Tensor, x: &Tensor, y: &Tensor) -> KResult<Tensor> {
    fn pick<T: Copy>(c: &ArrayD<bool>, x: &ArrayD<T>, y: &ArrayD<T>) -> KResult<ArrayD<T>> {
        let shape = broadcast_shapes(&broadcast_shapes(c.shape(), x.shape())?, y.shape())?;
        let bad = |s: &[usize]| format!("cannot broadcast {s:?} to {shape:?}");
        let cv = c.broadcast(IxDyn(&shape)).ok_or_else(|| bad(c.shape()))?;
        let xv = x.broadcast(IxDyn(&shape)).ok_or_else(|| bad(x.shape()))?;
        let yv = y.broadcast(IxDyn(&shape)).ok_or_else(|| bad(y.shape()))?;
        Ok(Zip::from(&cv)
            .and(&xv)
            .and(&yv)
            .map_collect(|&c, &a, &b| if c { a } else { b }))
    }
    let c = cond
        .as_bool()
        .ok_or_else(|| format!("condition must be bool, found {}", cond.ty()))?;
    Ok(match (x, y) {
        (Tensor::F32(a), Tensor::F32(b)) => Tensor::F32(pick(c, a, b)?),
        (Tensor::I64(a), Tensor::I64(b)) => Tensor::I64(pick(c, a, b)?),
        (Tensor::Bool(a), Tensor::Bool(b)) => Tensor::Bool(pick(c, a, b)?),
        _ => return Err(format!("X and Y dtypes differ: {} and {}", x.ty(), y.ty())),
    })
}

/// ONNX Cast between f32, i64 and bool: float to int truncates toward zero
/// (saturating at the i64 range, NaN to 0 rather than undefined), any
/// non-zero value (NaN included) is `true`, `true` is 1.
pub(crate) fn cast(t: Tensor, to: DType) -> Tensor {
    match (t, to) {
        (t, to) if t.dtype() == to => t,
        (Tensor::F32(a), DType::I64) => Tensor::I64(a.mapv(|v| v as i64)),
        (Tensor::F32(a), _) => Tensor::Bool(a.mapv(|v| v != 0.0)),
        (Tensor::I64(a), DType::F32) => Tensor::F32(a.mapv(|v| v as f32)),
        (Tensor::I64(a), _) => Tensor::Bool(a.mapv(|v| v != 0)),
        (Tensor::Bool(a), DType::F32) => Tensor::F32(a.mapv(|v| v as u8 as f32)),
        (Tensor::Bool(a), _) => Tensor::I64(a.mapv(|v| v as i64)),
    }
}
