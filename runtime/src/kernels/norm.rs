//! Normalisations: inference batch norm, LRN, softmax and log-softmax.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::Lrn;
use ndarray::{ArrayD, Axis};

/// `y = (x - mean) / sqrt(var + eps) * scale + bias` per channel (axis 1),
/// folded into one multiply-add per element (coefficients in f64).
pub(crate) fn batch_norm(
    mut x: ArrayD<f32>,
    scale: &ArrayD<f32>,
    bias: &ArrayD<f32>,
    mean: &ArrayD<f32>,
    var: &ArrayD<f32>,
    eps: f32,
) -> KResult<ArrayD<f32>> {
    if x.ndim() < 2 {
        return Err(format!(
            "input must have rank at least 2, found {:?}",
            x.shape()
        ));
    }
    let c = x.shape()[1];
    for (t, what) in [
        (scale, "scale"),
        (bias, "bias"),
        (mean, "mean"),
        (var, "var"),
    ] {
        if t.shape() != [c] {
            return Err(format!(
                "{what} must have shape [{c}], found {:?}",
                t.shape()
            ));
        }
    }
    let coef: Vec<(f32, f32)> = scale
        .iter()
        .zip(bias)
        .zip(mean.iter().zip(var))
        .map(|((&s, &b), (&m, &v))| {
            let a = s as f64 / (v as f64 + eps as f64).sqrt();
            (a as f32, (b as f64 - m as f64 * a) as f32)
        })
        .collect();
    for (ci, mut lane) in x.axis_iter_mut(Axis(1)).enumerate() {
        let (a, b) = coef[ci];
        lane.mapv_inplace(|v| v * a + b);
    }
    Ok(x)
}

/// ONNX LRN: `y = x / (bias + alpha/size * sum_sq)^beta`, the sum over
/// channels `c - floor((size-1)/2) ..= c + ceil((size-1)/2)` clipped to
/// the tensor.
pub(crate) fn lrn(x: &ArrayD<f32>, p: &Lrn) -> KResult<ArrayD<f32>> {
    let &[n, c, h, w] = x.shape() else {
        return Err(format!("input must have rank 4, found {:?}", x.shape()));
    };
    if p.size == 0 {
        return Err("size must be positive".into());
    }
    let (before, after) = ((p.size - 1) / 2, p.size / 2);
    let hw = h * w;
    let xc = standard(x);
    let xs = flat(&xc)?;
    let mut out = vec![0.0f32; xs.len()];
    let scale = p.alpha as f64 / p.size as f64;
    for ni in 0..n {
        let img = &xs[ni * c * hw..(ni + 1) * c * hw];
        for ci in 0..c {
            let (lo, hi) = (ci.saturating_sub(before), (ci + after).min(c - 1));
            for i in 0..hw {
                let sq: f64 = (lo..=hi).map(|k| (img[k * hw + i] as f64).powi(2)).sum();
                let v = img[ci * hw + i] as f64;
                out[(ni * c + ci) * hw + i] =
                    (v / (p.bias as f64 + scale * sq).powf(p.beta as f64)) as f32;
            }
        }
    }
    from_vec(vec![n, c, h, w], out)
}

/// Softmax (or log-softmax) along one axis, opset-13 style. The lane
/// maximum is subtracted first, so large inputs cannot overflow.
pub(crate) fn softmax(mut x: ArrayD<f32>, axis: i64, log: bool) -> KResult<ArrayD<f32>> {
    let ax = norm_axis(axis, x.ndim())?;
    for mut lane in x.lanes_mut(Axis(ax)) {
        let m = lane.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let sum: f64 = lane.iter().map(|&v| ((v - m) as f64).exp()).sum();
        if log {
            let ls = sum.ln();
            lane.mapv_inplace(|v| ((v - m) as f64 - ls) as f32);
        } else {
            lane.mapv_inplace(|v| (((v - m) as f64).exp() / sum) as f32);
        }
    }
    Ok(x)
}
