//! 2-D convolution (ONNX `Conv`, NCHW). Dense groups use im2col followed by
//! one GEMM per (image, group), which lets `matrixmultiply` do the heavy
//! lifting; single-channel groups (depthwise) use a direct loop, since a
//! GEMM with one output row gains nothing.

use super::{flat, from_vec, standard, KResult};
use dnnc_ir::infer::window_out;
use dnnc_ir::op::{Conv2d, DataLayout};
use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayD, ArrayView2, ArrayViewMut2};

/// Geometry of one spatial axis: the output positions `o` whose input
/// coordinate `o * stride + k * dilation - pad_begin` lands inside `[0, size)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Axis1 {
    pub size: usize,
    pub out: usize,
    pub stride: usize,
    pub dilation: usize,
    pub pad: usize,
}

impl Axis1 {
    /// `[lo, hi)`: output positions where kernel tap `k` reads real input.
    pub fn valid(&self, k: usize) -> (usize, usize) {
        let off = k * self.dilation; // input coord = o * stride + off - pad
        let lo = if off >= self.pad {
            0
        } else {
            (self.pad - off).div_ceil(self.stride)
        };
        let hi = if self.size + self.pad <= off {
            0
        } else {
            (self.size + self.pad - off).div_ceil(self.stride)
        };
        let hi = hi.min(self.out);
        (lo.min(hi), hi)
    }

    /// Input coordinate of output `o`, tap `k`; only for `o` in `valid(k)`.
    pub fn input(&self, o: usize, k: usize) -> usize {
        o * self.stride + k * self.dilation - self.pad
    }
}

/// `y = conv(x, w) + b` with ONNX semantics; a `data=nchw8c` conv
/// unblocks its input, convolves in NCHW and blocks the result (a
/// `data=nchw_to_nchw8c` conv only blocks the result), so the reference
/// stays the one NCHW loop nest below.
pub(crate) fn conv2d(
    x: &ArrayD<f32>,
    w: &ArrayD<f32>,
    b: Option<&ArrayD<f32>>,
    c: &Conv2d,
) -> KResult<ArrayD<f32>> {
    if c.data != DataLayout::Nchw {
        let plain = Conv2d {
            data: DataLayout::Nchw,
            ..c.clone()
        };
        let y = match c.data.input() {
            DataLayout::Nchw8c => conv2d(&unblock(x)?, w, b, &plain)?,
            _ => conv2d(x, w, b, &plain)?,
        };
        return block(&y);
    }
    let (xs, ws) = (x.shape(), w.shape());
    let (&[n, cin, h, wd], &[m, cg, kh, kw]) = (xs, ws) else {
        return Err(format!(
            "input and weight must have rank 4, found {xs:?} and {ws:?}"
        ));
    };
    let g = c.group;
    if g == 0 || cin != cg * g || m % g != 0 {
        return Err(format!(
            "input has {cin} channels and weight is {ws:?}, which does not fit group {g}"
        ));
    }
    if c.strides.contains(&0) || c.dilations.contains(&0) || kh == 0 || kw == 0 {
        return Err("strides, dilations and kernel sizes must be positive".into());
    }
    if let Some(b) = b {
        if b.shape() != [m] {
            return Err(format!("bias must have shape [{m}], found {:?}", b.shape()));
        }
    }
    let (ho, wo) = match (
        window_out(
            h,
            kh,
            c.strides[0],
            c.pads[0],
            c.pads[2],
            c.dilations[0],
            false,
        ),
        window_out(
            wd,
            kw,
            c.strides[1],
            c.pads[1],
            c.pads[3],
            c.dilations[1],
            false,
        ),
    ) {
        (Some(ho), Some(wo)) => (ho, wo),
        _ => {
            return Err(format!(
                "kernel {kh}x{kw} does not fit the padded {h}x{wd} input"
            ))
        }
    };
    let ay = Axis1 {
        size: h,
        out: ho,
        stride: c.strides[0],
        dilation: c.dilations[0],
        pad: c.pads[0],
    };
    let ax = Axis1 {
        size: wd,
        out: wo,
        stride: c.strides[1],
        dilation: c.dilations[1],
        pad: c.pads[1],
    };

    let xc = standard(x);
    let xsl = flat(&xc)?;
    let wc = standard(w);
    let wsl = flat(&wc)?;
    let (hw, p) = (h * wd, ho * wo);
    let mg = m / g;
    let k = cg * kh * kw;
    let mut out = vec![0.0f32; n * m * p];
    let pointwise =
        kh == 1 && kw == 1 && c.strides == [1, 1] && c.pads == [0; 4] && (ho, wo) == (h, wd);
    let mut cols = if pointwise || cg == 1 {
        vec![]
    } else {
        vec![0.0f32; k * p]
    };

    if p > 0 && m > 0 {
        for ni in 0..n {
            for gi in 0..g {
                let x0 = (ni * cin + gi * cg) * hw;
                let xin = &xsl[x0..x0 + cg * hw];
                let wg = &wsl[gi * mg * k..(gi + 1) * mg * k];
                let o0 = (ni * m + gi * mg) * p;
                let og = &mut out[o0..o0 + mg * p];
                if cg == 1 {
                    for (mi, oplane) in og.chunks_exact_mut(p).enumerate() {
                        direct_plane(xin, &wg[mi * k..(mi + 1) * k], oplane, &ay, &ax, kh, kw);
                    }
                    continue;
                }
                let gemm_err = |e: ndarray::ShapeError| format!("internal error: {e}");
                let wmat = ArrayView2::from_shape((mg, k), wg).map_err(gemm_err)?;
                let mut omat = ArrayViewMut2::from_shape((mg, p), og).map_err(gemm_err)?;
                if pointwise {
                    let xmat = ArrayView2::from_shape((cg, p), xin).map_err(gemm_err)?;
                    general_mat_mul(1.0, &wmat, &xmat, 0.0, &mut omat);
                } else {
                    im2col(xin, &mut cols, cg, &ay, &ax, kh, kw);
                    let cmat = ArrayView2::from_shape((k, p), &cols[..]).map_err(gemm_err)?;
                    general_mat_mul(1.0, &wmat, &cmat, 0.0, &mut omat);
                }
            }
        }
        if let Some(b) = b {
            let bias: Vec<f32> = b.iter().copied().collect();
            for (plane, &bv) in out.chunks_exact_mut(p).zip(bias.iter().cycle()) {
                plane.iter_mut().for_each(|v| *v += bv);
            }
        }
    }
    from_vec(vec![n, m, ho, wo], out)
}

/// Fills `cols[(c*kh + i)*kw + j][oy*wo + ox]` with the input pixel tap
/// `(i, j)` of output `(oy, ox)` reads from channel `c`, or 0 in padding.
fn im2col(xin: &[f32], cols: &mut [f32], cg: usize, ay: &Axis1, ax: &Axis1, kh: usize, kw: usize) {
    let (hw, p, wo) = (ay.size * ax.size, ay.out * ax.out, ax.out);
    let mut rows = cols.chunks_exact_mut(p);
    for ci in 0..cg {
        let plane = &xin[ci * hw..(ci + 1) * hw];
        for i in 0..kh {
            let (ylo, yhi) = ay.valid(i);
            for j in 0..kw {
                let Some(row) = rows.next() else { return };
                let (xlo, xhi) = ax.valid(j);
                for (oy, drow) in row.chunks_exact_mut(wo).enumerate() {
                    if oy < ylo || oy >= yhi || xlo >= xhi {
                        drow.fill(0.0);
                        continue;
                    }
                    let iy = ay.input(oy, i);
                    let srow = &plane[iy * ax.size..(iy + 1) * ax.size];
                    drow[..xlo].fill(0.0);
                    drow[xhi..].fill(0.0);
                    let ix0 = ax.input(xlo, j);
                    if ax.stride == 1 {
                        drow[xlo..xhi].copy_from_slice(&srow[ix0..ix0 + (xhi - xlo)]);
                    } else {
                        for (d, s) in drow[xlo..xhi]
                            .iter_mut()
                            .zip(srow[ix0..].iter().step_by(ax.stride))
                        {
                            *d = *s;
                        }
                    }
                }
            }
        }
    }
}

/// One output plane from one input plane (a depthwise channel):
/// `out[oy][ox] += sum_{i,j} w[i][j] * in[iy][ix]`.
fn direct_plane(
    plane: &[f32],
    w: &[f32],
    out: &mut [f32],
    ay: &Axis1,
    ax: &Axis1,
    kh: usize,
    kw: usize,
) {
    let wo = ax.out;
    for i in 0..kh {
        let (ylo, yhi) = ay.valid(i);
        for j in 0..kw {
            let wv = w[i * kw + j];
            let (xlo, xhi) = ax.valid(j);
            if xlo >= xhi {
                continue;
            }
            let ix0 = ax.input(xlo, j);
            for oy in ylo..yhi {
                let iy = ay.input(oy, i);
                let srow = &plane[iy * ax.size..(iy + 1) * ax.size];
                let drow = &mut out[oy * wo + xlo..oy * wo + xhi];
                if ax.stride == 1 {
                    for (d, s) in drow.iter_mut().zip(&srow[ix0..]) {
                        *d += wv * s;
                    }
                } else {
                    for (d, s) in drow.iter_mut().zip(srow[ix0..].iter().step_by(ax.stride)) {
                        *d += wv * s;
                    }
                }
            }
        }
    }
}

/// `[N, C/8, H, W, 8]` to `[N, C, H, W]`.
pub(crate) fn unblock(x: &ArrayD<f32>) -> KResult<ArrayD<f32>> {
    let &[n, cb, h, w, b] = x.shape() else {
        return Err(format!(
            "a data=nchw8c input must be [N, C/8, H, W, 8], found {:?}",
            x.shape()
        ));
    };
    if b != DataLayout::BLOCK {
        return Err(format!(
            "a data=nchw8c input's last axis must be 8, found {b}"
        ));
    }
    let y = x.view().permuted_axes(vec![0, 1, 4, 2, 3]);
    let y = y.as_standard_layout().into_owned();
    y.into_shape_with_order(vec![n, cb * b, h, w])
        .map_err(|e| e.to_string())
}

/// `[N, C, H, W]` (C a multiple of 8) to `[N, C/8, H, W, 8]`.
pub(crate) fn block(x: &ArrayD<f32>) -> KResult<ArrayD<f32>> {
    let &[n, c, h, w] = x.shape() else {
        return Err(format!("expected [N, C, H, W], found {:?}", x.shape()));
    };
    let b = DataLayout::BLOCK;
    if !c.is_multiple_of(b) {
        return Err(format!("{c} channels do not divide into blocks of {b}"));
    }
    let y = standard(x)
        .into_owned()
        .into_shape_with_order(vec![n, c / b, b, h, w])
        .map_err(|e| e.to_string())?;
    Ok(y.permuted_axes(vec![0, 1, 3, 4, 2])
        .as_standard_layout()
        .into_owned())
}
