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

/// Mean and `1 / sqrt(var + eps)` of a lane, in f64 (two passes, so a
/// large mean does not cancel the variance).
fn moments(v: impl Iterator<Item = f32> + Clone, n: usize, eps: f32) -> (f64, f64) {
    let n = n.max(1) as f64;
    let mean = v.clone().map(f64::from).sum::<f64>() / n;
    let var = v.map(|x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps as f64).sqrt())
}

/// ONNX InstanceNormalization: per (image, channel), normalise over the
/// remaining axes, then `* scale[c] + bias[c]`.
pub(crate) fn instance_norm(
    x: &ArrayD<f32>,
    scale: &ArrayD<f32>,
    bias: &ArrayD<f32>,
    eps: f32,
) -> KResult<ArrayD<f32>> {
    let s = x.shape();
    if s.len() < 3 {
        return Err(format!("input must have rank at least 3, found {s:?}"));
    }
    let c = s[1];
    for (t, what) in [(scale, "scale"), (bias, "bias")] {
        if t.shape() != [c] {
            return Err(format!(
                "{what} must have shape [{c}], found {:?}",
                t.shape()
            ));
        }
    }
    let inner: usize = s[2..].iter().product();
    let xc = standard(x);
    let xs = flat(&xc)?;
    let mut out = vec![0.0f32; xs.len()];
    if inner > 0 {
        let (sc, bc) = (standard(scale), standard(bias));
        let (sc, bc) = (flat(&sc)?, flat(&bc)?);
        for (k, (src, dst)) in xs
            .chunks_exact(inner)
            .zip(out.chunks_exact_mut(inner))
            .enumerate()
        {
            let ci = k % c;
            let (mean, inv) = moments(src.iter().copied(), inner, eps);
            let (a, b) = (inv * sc[ci] as f64, bc[ci] as f64);
            for (o, &v) in dst.iter_mut().zip(src) {
                *o = ((v as f64 - mean) * a + b) as f32;
            }
        }
    }
    from_vec(s.to_vec(), out)
}

/// ONNX LayerNormalization (result `Y` only): normalise over axes
/// `axis..`, then `* scale + bias`, both broadcast to those axes.
pub(crate) fn layer_norm(
    x: &ArrayD<f32>,
    scale: &ArrayD<f32>,
    bias: Option<&ArrayD<f32>>,
    axis: i64,
    eps: f32,
) -> KResult<ArrayD<f32>> {
    let s = x.shape();
    let ax = norm_axis(axis, s.len())?;
    let inner_shape = ndarray::IxDyn(&s[ax..]);
    let inner: usize = s[ax..].iter().product();
    let bcast = |t: &ArrayD<f32>, what: &str| -> KResult<Vec<f32>> {
        t.broadcast(inner_shape.clone())
            .map(|v| v.iter().copied().collect())
            .ok_or_else(|| {
                format!(
                    "{what} {:?} does not broadcast to the normalised shape {:?}",
                    t.shape(),
                    &s[ax..]
                )
            })
    };
    let sc = bcast(scale, "scale")?;
    let bc = match bias {
        Some(b) => bcast(b, "bias")?,
        None => vec![0.0; inner],
    };
    let xc = standard(x);
    let xs = flat(&xc)?;
    let mut out = vec![0.0f32; xs.len()];
    if inner > 0 {
        for (src, dst) in xs.chunks_exact(inner).zip(out.chunks_exact_mut(inner)) {
            let (mean, inv) = moments(src.iter().copied(), inner, eps);
            for (k, (o, &v)) in dst.iter_mut().zip(src).enumerate() {
                *o = ((v as f64 - mean) * inv * sc[k] as f64 + bc[k] as f64) as f32;
            }
        }
    }
    from_vec(s.to_vec(), out)
}
