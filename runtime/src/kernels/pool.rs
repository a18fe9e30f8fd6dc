//! Windowed and global pooling (NCHW).

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::window_out;
use dnnc_ir::op::{DataLayout, Pool2d};
use ndarray::ArrayD;

/// Validated geometry shared by both windowed pools.
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    ho: usize,
    wo: usize,
}

fn geometry(x: &ArrayD<f32>, p: &Pool2d) -> KResult<Geometry> {
    let &[n, c, h, w] = x.shape() else {
        return Err(format!("input must have rank 4, found {:?}", x.shape()));
    };
    if p.kernel.contains(&0) || p.strides.contains(&0) || p.dilations.contains(&0) {
        return Err("kernel, strides and dilations must be positive".into());
    }
    let (k, s, d, pd) = (p.kernel, p.strides, p.dilations, p.pads);
    match (
        window_out(h, k[0], s[0], pd[0], pd[2], d[0], p.ceil_mode),
        window_out(w, k[1], s[1], pd[1], pd[3], d[1], p.ceil_mode),
    ) {
        (Some(ho), Some(wo)) => Ok(Geometry { n, c, h, w, ho, wo }),
        _ => Err(format!(
            "window {:?} does not fit the padded {h}x{w} input",
            p.kernel
        )),
    }
}

/// Input coordinates (signed, may lie in padding) of the taps of the window
/// at output position `o` along one axis.
fn taps(
    o: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    k: usize,
) -> impl Iterator<Item = isize> {
    let start = (o * stride) as isize - pad as isize;
    (0..k).map(move |i| start + (i * dilation) as isize)
}

/// Runs `f(plane, out_plane)` over every (n, c) plane pair.
fn per_plane(
    x: &ArrayD<f32>,
    g: &Geometry,
    mut f: impl FnMut(&[f32], &mut [f32]),
) -> KResult<ArrayD<f32>> {
    let xc = standard(x);
    let xs = flat(&xc)?;
    let (hw, pout) = (g.h * g.w, g.ho * g.wo);
    let mut out = vec![0.0f32; g.n * g.c * pout];
    if hw > 0 && pout > 0 {
        for (plane, oplane) in xs.chunks_exact(hw).zip(out.chunks_exact_mut(pout)) {
            f(plane, oplane);
        }
    }
    from_vec(vec![g.n, g.c, g.ho, g.wo], out)
}

/// ONNX MaxPool: the maximum of the in-bounds taps; padding never wins.
/// NaN propagates. A window with no in-bounds tap (possible only with
/// dilation) yields -inf.
pub(crate) fn max_pool(x: &ArrayD<f32>, p: &Pool2d) -> KResult<ArrayD<f32>> {
    if p.data != DataLayout::Nchw {
        return on_blocks(x, p, max_pool);
    }
    let g = geometry(x, p)?;
    let (h, w, wo) = (g.h as isize, g.w as isize, g.wo);
    per_plane(x, &g, |plane, out| {
        for (oy, orow) in out.chunks_exact_mut(wo).enumerate() {
            for (ox, o) in orow.iter_mut().enumerate() {
                let mut m = f32::NEG_INFINITY;
                for iy in taps(oy, p.strides[0], p.dilations[0], p.pads[0], p.kernel[0]) {
                    if iy < 0 || iy >= h {
                        continue;
                    }
                    for ix in taps(ox, p.strides[1], p.dilations[1], p.pads[1], p.kernel[1]) {
                        if ix < 0 || ix >= w {
                            continue;
                        }
                        let v = plane[(iy * w + ix) as usize];
                        if v > m || v.is_nan() {
                            m = v;
                        }
                    }
                }
                *o = m;
            }
        }
    })
}

/// ONNX AveragePool (PyTorch semantics). The sum covers in-bounds taps.
/// The divisor is the number of in-bounds taps, or with `count_include_pad`
/// the number of taps inside the padded input; taps beyond the end padding
/// (which `ceil_mode` can create) are never counted.
pub(crate) fn avg_pool(x: &ArrayD<f32>, p: &Pool2d) -> KResult<ArrayD<f32>> {
    if p.data != DataLayout::Nchw {
        return on_blocks(x, p, avg_pool);
    }
    let g = geometry(x, p)?;
    let (h, w, wo) = (g.h as isize, g.w as isize, g.wo);
    let (h_end, w_end) = (h + p.pads[2] as isize, w + p.pads[3] as isize);
    per_plane(x, &g, |plane, out| {
        for (oy, orow) in out.chunks_exact_mut(wo).enumerate() {
            for (ox, o) in orow.iter_mut().enumerate() {
                let mut sum = 0.0f64;
                let (mut inside, mut padded) = (0usize, 0usize);
                for iy in taps(oy, p.strides[0], p.dilations[0], p.pads[0], p.kernel[0]) {
                    for ix in taps(ox, p.strides[1], p.dilations[1], p.pads[1], p.kernel[1]) {
                        if iy < h_end && ix < w_end {
                            padded += 1;
                        }
                        if (0..h).contains(&iy) && (0..w).contains(&ix) {
                            inside += 1;
                            sum += plane[(iy * w + ix) as usize] as f64;
                        }
                    }
                }
                let count = if p.count_include_pad { padded } else { inside };
                *o = (sum / count as f64) as f32;
            }
        }
    })
}

/// Pool `f` of a channel-blocked `x` (`data=nchw8c`): the plain pool of
/// its planes, blocked again.
fn on_blocks(
    x: &ArrayD<f32>,
    p: &Pool2d,
    f: fn(&ArrayD<f32>, &Pool2d) -> KResult<ArrayD<f32>>,
) -> KResult<ArrayD<f32>> {
    let plain = Pool2d {
        data: DataLayout::Nchw,
        ..p.clone()
    };
    super::conv::block(&f(&super::conv::unblock(x)?, &plain)?)
}

/// Mean (or max) over every axis after the first two, keeping them as 1.
pub(crate) fn global_pool(x: &ArrayD<f32>, max: bool) -> KResult<ArrayD<f32>> {
    let shape = x.shape();
    if shape.len() < 3 {
        return Err(format!("input must have rank at least 3, found {shape:?}"));
    }
    let outer = shape[0] * shape[1];
    let inner: usize = shape[2..].iter().product();
    let xc = standard(x);
    let xs = flat(&xc)?;
    let reduce = |s: &[f32]| -> f32 {
        if max {
            s.iter().fold(
                f32::NEG_INFINITY,
                |m, &v| if v > m || v.is_nan() { v } else { m },
            )
        } else {
            (s.iter().map(|&v| v as f64).sum::<f64>() / s.len() as f64) as f32
        }
    };
    let out: Vec<f32> = if inner == 0 {
        vec![reduce(&[]); outer]
    } else {
        xs.chunks_exact(inner).map(reduce).collect()
    };
    let mut oshape = shape.to_vec();
    oshape[2..].iter_mut().for_each(|d| *d = 1);
    from_vec(oshape, out)
}
