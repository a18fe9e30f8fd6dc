//! 2-D transposed convolution (ONNX `ConvTranspose`, NCHW) by direct
//! scatter: every input pixel adds `x * w[tap]` to the output pixel
//! `i * stride + k * dilation - pad_begin`, when that lands in the output.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::{conv_transpose_channels, conv_transpose_out};
use dnnc_ir::op::ConvTranspose2d;
use ndarray::ArrayD;

/// `y = conv_transpose(x, w) + b` with ONNX semantics; `w` is
/// `[C, M/group, kH, kW]`.
pub(crate) fn conv_transpose2d(
    x: &ArrayD<f32>,
    w: &ArrayD<f32>,
    b: Option<&ArrayD<f32>>,
    c: &ConvTranspose2d,
) -> KResult<ArrayD<f32>> {
    let (xs, ws) = (x.shape(), w.shape());
    let (&[n, cin, h, wd], &[wc, mg, kh, kw]) = (xs, ws) else {
        return Err(format!(
            "input and weight must have rank 4, found {xs:?} and {ws:?}"
        ));
    };
    let m = conv_transpose_channels(cin, wc, mg, c.group)?;
    if let Some(b) = b {
        if b.shape() != [m] {
            return Err(format!("bias must have shape [{m}], found {:?}", b.shape()));
        }
    }
    let ho = conv_transpose_out(h, kh, 0, c)?;
    let wo = conv_transpose_out(wd, kw, 1, c)?;
    let cg = cin / c.group;
    let (xc, wcow) = (standard(x), standard(w));
    let (xsl, wsl) = (flat(&xc)?, flat(&wcow)?);
    let total = [n, m, ho, wo]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("output has too many elements")?;
    let mut out = vec![0.0f32; total];
    let (pt, pl) = (c.pads[0] as isize, c.pads[1] as isize);
    let (sh, sw) = (c.strides[0] as isize, c.strides[1] as isize);
    let (dh, dw) = (c.dilations[0] as isize, c.dilations[1] as isize);
    for ni in 0..n {
        for gi in 0..c.group {
            for ci in gi * cg..(gi + 1) * cg {
                let xplane = &xsl[(ni * cin + ci) * h * wd..(ni * cin + ci + 1) * h * wd];
                for mi in 0..mg {
                    let mo = gi * mg + mi;
                    let kern = &wsl[(ci * mg + mi) * kh * kw..(ci * mg + mi + 1) * kh * kw];
                    let oplane = &mut out[(ni * m + mo) * ho * wo..(ni * m + mo + 1) * ho * wo];
                    for iy in 0..h {
                        for i in 0..kh {
                            let oy = iy as isize * sh + i as isize * dh - pt;
                            if oy < 0 || oy >= ho as isize {
                                continue;
                            }
                            let orow = &mut oplane[oy as usize * wo..(oy as usize + 1) * wo];
                            for ix in 0..wd {
                                let xv = xplane[iy * wd + ix];
                                for j in 0..kw {
                                    let ox = ix as isize * sw + j as isize * dw - pl;
                                    if ox >= 0 && ox < wo as isize {
                                        orow[ox as usize] += xv * kern[i * kw + j];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(b) = b {
        if ho * wo > 0 {
            let bias: Vec<f32> = b.iter().copied().collect();
            for (plane, &bv) in out.chunks_exact_mut(ho * wo).zip(bias.iter().cycle()) {
                plane.iter_mut().for_each(|v| *v += bv);
            }
        }
    }
    from_vec(vec![n, m, ho, wo], out)
}
