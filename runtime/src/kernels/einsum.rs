//! Einsum by direct evaluation over the whole index space: for every
//! output position, the sum over the contracted indices of the product of
//! the operands' elements. Slow for big contractions, but exact in meaning
//! for every equation without ellipsis (diagonals included) and accumulated
//! in f64.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::einsum_sizes;
use dnnc_ir::op::EinsumSpec;
use ndarray::ArrayD;

/// Evaluates `equation` on f32 operands.
pub(crate) fn einsum(equation: &str, ops: &[&ArrayD<f32>]) -> KResult<ArrayD<f32>> {
    let spec = EinsumSpec::parse(equation)?;
    let shapes: Vec<&[usize]> = ops.iter().map(|a| a.shape()).collect();
    let sizes = einsum_sizes(&spec, &shapes)?;
    let all = spec.all_indices();
    let size_of = |c: u8| sizes.iter().find(|(l, _)| *l == c).map_or(1, |&(_, d)| d);
    let dims: Vec<usize> = all.iter().map(|&c| size_of(c)).collect();
    // stride[k][j]: how far operand k moves when index all[j] advances; a
    // repeated letter adds its axes' strides (a diagonal), a broadcast
    // size-1 axis contributes 0.
    let mut strides = vec![vec![0usize; all.len()]; ops.len()];
    for (k, letters) in spec.inputs.iter().enumerate() {
        let s = shapes[k];
        let mut st = 1usize;
        for ax in (0..s.len()).rev() {
            if s[ax] != 1 {
                let j = all.iter().position(|&c| c == letters[ax]).unwrap_or(0);
                strides[k][j] += st;
            }
            st *= s[ax];
        }
    }
    let datas: Vec<_> = ops.iter().map(|a| standard(a)).collect();
    let slices: Vec<&[f32]> = datas.iter().map(flat).collect::<KResult<_>>()?;
    let n_out = spec.output.len();
    let out_shape: Vec<usize> = dims[..n_out].to_vec();
    let out_len: usize = out_shape.iter().product();
    let inner: usize = dims[n_out..].iter().product();
    let mut out = Vec::with_capacity(out_len);
    let mut idx = vec![0usize; all.len()];
    for _ in 0..out_len {
        let mut acc = 0.0f64;
        if inner > 0 {
            idx[n_out..].fill(0);
            for _ in 0..inner {
                let mut p = 1.0f64;
                for (k, sl) in slices.iter().enumerate() {
                    let off: usize = idx.iter().zip(&strides[k]).map(|(i, s)| i * s).sum();
                    p *= *sl
                        .get(off)
                        .ok_or("internal error: Einsum index out of range")?
                        as f64;
                }
                acc += p;
                advance(&mut idx[n_out..], &dims[n_out..]);
            }
        }
        out.push(acc as f32);
        advance(&mut idx[..n_out], &out_shape);
    }
    from_vec(out_shape, out)
}

/// Steps a row-major odometer; wraps to zeros after the last position.
fn advance(idx: &mut [usize], dims: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < dims[d] {
            return;
        }
        idx[d] = 0;
    }
}
