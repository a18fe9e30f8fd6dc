//! Ops that make tensors from static attributes or from another tensor's
//! metadata: Shape, ConstantOfShape, Range and Tile.

use super::{flat, from_vec, map_dtype, standard, KResult};
use dnnc_ir::infer::shape_range;
use dnnc_ir::op::{RangeParams, Scalar};
use dnnc_ir::Tensor;
use ndarray::ArrayD;

/// The i64 vector `x.shape[start..end]` (ONNX clamping rules).
pub(crate) fn shape(x: &Tensor, start: i64, end: i64) -> KResult<Tensor> {
    let s = x.shape();
    let (lo, hi) = shape_range(s.len(), start, end);
    let dims: Vec<i64> = s[lo..hi.max(lo)]
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| format!("dimension {d} exceeds i64")))
        .collect::<KResult<_>>()?;
    Ok(Tensor::I64(from_vec(vec![dims.len()], dims)?))
}

/// A tensor of `shape` filled with `value`.
pub(crate) fn constant_of_shape(shape: &[usize], value: Scalar) -> KResult<Tensor> {
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| format!("shape {shape:?} has too many elements"))?;
    Ok(match value {
        Scalar::F32(v) => Tensor::F32(from_vec(shape.to_vec(), vec![v; n])?),
        Scalar::I64(v) => Tensor::I64(from_vec(shape.to_vec(), vec![v; n])?),
        Scalar::Bool(v) => Tensor::Bool(from_vec(shape.to_vec(), vec![v; n])?),
    })
}

/// `start + i * delta` for `i < len` (ONNX's definition, not repeated
/// addition, so f32 ranges do not drift).
pub(crate) fn range(r: &RangeParams) -> KResult<Tensor> {
    let n = r.len()?;
    Ok(match *r {
        RangeParams::F32 { start, delta, .. } => Tensor::F32(from_vec(
            vec![n],
            (0..n).map(|i| start + i as f32 * delta).collect(),
        )?),
        RangeParams::I64 { start, delta, .. } => Tensor::I64(from_vec(
            vec![n],
            (0..n)
                .map(|i| start.wrapping_add((i as i64).wrapping_mul(delta)))
                .collect(),
        )?),
    })
}

/// Repeats `x` `repeats[i]` times along each axis `i`.
pub(crate) fn tile(x: &Tensor, repeats: &[usize]) -> KResult<Tensor> {
    fn go<T: Copy>(a: &ArrayD<T>, repeats: &[usize]) -> KResult<ArrayD<T>> {
        let s = a.shape();
        if repeats.len() != s.len() {
            return Err(format!(
                "repeats {repeats:?} has {} entries for a rank-{} input",
                repeats.len(),
                s.len()
            ));
        }
        let out_shape = s
            .iter()
            .zip(repeats)
            .map(|(&d, &r)| d.checked_mul(r))
            .collect::<Option<Vec<_>>>()
            .ok_or("tiled shape overflows")?;
        let total = out_shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or("tiled shape has too many elements")?;
        let ac = standard(a);
        let src = flat(&ac)?;
        let r = s.len();
        let mut strides = vec![1usize; r];
        for d in (0..r.saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * s[d + 1];
        }
        let mut out = Vec::with_capacity(total);
        for mut k in 0..total {
            let mut idx = 0;
            for d in (0..r).rev() {
                let c = k % out_shape[d];
                k /= out_shape[d];
                idx += (c % s[d]) * strides[d];
            }
            out.push(src[idx]);
        }
        from_vec(out_shape, out)
    }
    Ok(map_dtype!(x, |a| go(a, repeats)?))
}
