//! Matrix products: numpy `matmul` and ONNX `Gemm`.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::broadcast_shapes;
use dnnc_ir::op::Gemm;
use ndarray::linalg::general_mat_mul;
use ndarray::{Array2, ArrayD, ArrayView2, ArrayViewMut2, Ix2, IxDyn, Zip};

/// Flat index into a (right-aligned, possibly shorter) broadcast operand of
/// the element at flat index `i` of `out_shape`.
pub(crate) fn broadcast_index(mut i: usize, out_shape: &[usize], in_shape: &[usize]) -> usize {
    let (mut idx, mut stride) = (0, 1);
    for d in (0..out_shape.len()).rev() {
        let od = out_shape[d].max(1);
        let coord = i % od;
        i /= od;
        let k = out_shape.len() - 1 - d;
        if k < in_shape.len() {
            let id = in_shape[in_shape.len() - 1 - k];
            if id != 1 {
                idx += coord * stride;
            }
            stride *= id;
        }
    }
    idx
}

/// numpy matmul: 1-D operands are promoted (and the promoted axis dropped
/// from the result); leading batch axes broadcast.
pub(crate) fn matmul(a: &ArrayD<f32>, b: &ArrayD<f32>) -> KResult<ArrayD<f32>> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return Err("MatMul operands must have rank at least 1".into());
    }
    let mut sa = a.shape().to_vec();
    let mut sb = b.shape().to_vec();
    let (a1, b1) = (sa.len() == 1, sb.len() == 1);
    if a1 {
        sa.insert(0, 1);
    }
    if b1 {
        sb.push(1);
    }
    let (ra, rb) = (sa.len(), sb.len());
    let (m, k, k2, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 2], sb[rb - 1]);
    if k != k2 {
        return Err(format!(
            "inner dimensions differ: {:?} x {:?} ({k} vs {k2})",
            a.shape(),
            b.shape()
        ));
    }
    let (ba, bb) = (&sa[..ra - 2], &sb[..rb - 2]);
    let batch = broadcast_shapes(ba, bb)?;
    let nb: usize = batch.iter().product();
    let (ac, bc) = (standard(a), standard(b));
    let (asl, bsl) = (flat(&ac)?, flat(&bc)?);
    let mut out = vec![0.0f32; nb * m * n];
    if m * n > 0 {
        let err = |e: ndarray::ShapeError| format!("internal error: {e}");
        for (bi, oc) in out.chunks_exact_mut(m * n).enumerate() {
            let ia = broadcast_index(bi, &batch, ba);
            let ib = broadcast_index(bi, &batch, bb);
            let am =
                ArrayView2::from_shape((m, k), &asl[ia * m * k..(ia + 1) * m * k]).map_err(err)?;
            let bm =
                ArrayView2::from_shape((k, n), &bsl[ib * k * n..(ib + 1) * k * n]).map_err(err)?;
            let mut om = ArrayViewMut2::from_shape((m, n), oc).map_err(err)?;
            general_mat_mul(1.0, &am, &bm, 0.0, &mut om);
        }
    }
    let mut shape = batch;
    if !a1 {
        shape.push(m);
    }
    if !b1 {
        shape.push(n);
    }
    from_vec(shape, out)
}

/// ONNX Gemm: `alpha * op(A) @ op(B) + beta * C`, C broadcast to `[M, N]`.
pub(crate) fn gemm(
    a: &ArrayD<f32>,
    b: &ArrayD<f32>,
    c: Option<&ArrayD<f32>>,
    p: &Gemm,
) -> KResult<ArrayD<f32>> {
    fn to2<'t>(t: &'t ArrayD<f32>, what: &str) -> KResult<ArrayView2<'t, f32>> {
        t.view()
            .into_dimensionality::<Ix2>()
            .map_err(|_| format!("{what} must have rank 2, found {:?}", t.shape()))
    }
    let (a2, b2) = (to2(a, "A")?, to2(b, "B")?);
    let a2 = if p.trans_a { a2.reversed_axes() } else { a2 };
    let b2 = if p.trans_b { b2.reversed_axes() } else { b2 };
    let ((m, k), (k2, n)) = (a2.dim(), b2.dim());
    if k != k2 {
        return Err(format!("inner dimensions differ: {k} vs {k2}"));
    }
    let mut out = Array2::<f32>::zeros((m, n));
    general_mat_mul(p.alpha, &a2, &b2, 0.0, &mut out);
    let mut out = out.into_dyn();
    if let Some(c) = c {
        if c.ndim() > 2 {
            return Err(format!("C must have rank at most 2, found {:?}", c.shape()));
        }
        let cv = c
            .broadcast(IxDyn(&[m, n]))
            .ok_or_else(|| format!("C {:?} does not broadcast to [{m}, {n}]", c.shape()))?;
        let beta = p.beta;
        Zip::from(&mut out)
            .and(&cv)
            .for_each(|o, &cv| *o += beta * cv);
    }
    Ok(out)
}
