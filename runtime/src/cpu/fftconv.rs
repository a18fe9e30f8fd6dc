//! FFT convolution: the native helper [`dnnc_fft_conv`] that generated code
//! calls once per (image, group), and the compile-time filter transform
//! [`filter_spectrum`] whose result the executable keeps as a weight.
//!
//! Whole-image transforms: the zero-padded input (`H + pt + pb` by
//! `W + pl + pr`) is embedded in an `hf x wf` grid (the next 2·3·5-smooth
//! sizes), so the circular correlation equals the linear one on every
//! output position. Real-to-complex FFTs along rows (`realfft`), then
//! complex FFTs along columns (`rustfft`), a complex multiply-accumulate
//! over the input channels per output channel, and the inverse transforms
//! on the rows that are kept. Spectra are stored column-major
//! (`[wf/2 + 1][hf]` complex) so the column FFTs run on contiguous chunks.
//! The filter spectrum is conjugated (correlation, not convolution) and
//! pre-scaled by `1 / (hf * wf)`, so the run-time inverse needs no scaling.

use realfft::num_complex::Complex;
use realfft::RealFftPlanner;
use rustfft::FftPlanner;
use std::cell::RefCell;

/// Number of `i64` entries of the geometry descriptor passed to
/// [`dnnc_fft_conv`]: `cg, mg, h, w, pt, pl, hf, wf, oh, ow`.
pub const DESC_LEN: usize = 10;

/// The smallest `n' >= n` whose only prime factors are 2, 3 and 5 (sizes
/// that `rustfft` transforms with its fast radix kernels).
pub fn smooth_size(n: usize) -> usize {
    let mut k = n.max(1);
    loop {
        let mut r = k;
        for p in [2, 3, 5] {
            while r.is_multiple_of(p) {
                r /= p;
            }
        }
        if r == 1 {
            return k;
        }
        k += 1;
    }
}

/// Number of complex values in one spectrum plane: `(wf/2 + 1) * hf`.
pub fn plane_len(hf: usize, wf: usize) -> usize {
    (wf / 2 + 1) * hf
}

/// Planners and scratch of the calling thread (plans are cached by size).
struct Plans {
    real: RealFftPlanner<f32>,
    complex: FftPlanner<f32>,
    row: Vec<f32>,
    spec_row: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
}

thread_local! {
    static PLANS: RefCell<Plans> = RefCell::new(Plans {
        real: RealFftPlanner::new(),
        complex: FftPlanner::new(),
        row: Vec::new(),
        spec_row: Vec::new(),
        scratch: Vec::new(),
    });
}

/// Forward 2-D real FFT of `rows` (each `w` values, placed at row offset
/// `r0` and column offset `c0` of an `hf x wf` zero grid) into `out`
/// (`[wf/2+1][hf]` complex).
#[allow(clippy::too_many_arguments)]
fn forward(
    p: &mut Plans,
    src: &[f32],
    h: usize,
    w: usize,
    r0: usize,
    c0: usize,
    hf: usize,
    wf: usize,
    out: &mut [Complex<f32>],
) -> Result<(), String> {
    let wc = wf / 2 + 1;
    let r2c = p.real.plan_fft_forward(wf);
    let col = p.complex.plan_fft_forward(hf);
    p.row.resize(wf, 0.0);
    p.spec_row.resize(wc, Complex::default());
    let zero = Complex::default();
    for r in 0..hf {
        let data = r >= r0 && r < r0 + h;
        if !data {
            for c in 0..wc {
                out[c * hf + r] = zero;
            }
            continue;
        }
        p.row.fill(0.0);
        let s = &src[(r - r0) * w..(r - r0 + 1) * w];
        p.row[c0..c0 + w].copy_from_slice(s);
        r2c.process(&mut p.row, &mut p.spec_row)
            .map_err(|e| e.to_string())?;
        for c in 0..wc {
            out[c * hf + r] = p.spec_row[c];
        }
    }
    p.scratch
        .resize(col.get_inplace_scratch_len(), Complex::default());
    col.process_with_scratch(out, &mut p.scratch);
    Ok(())
}

/// The filter spectra of one convolution, all groups: for filter
/// `w[m][ci][kh][kw]` (`m` over all groups), `conj(FFT2(w on an hf x wf
/// grid)) / (hf * wf)` as interleaved `(re, im)` f32 in
/// `[m][ci][wf/2+1][hf]` order — the layout [`dnnc_fft_conv`] reads.
pub fn filter_spectrum(
    w: &[f32],
    (m, cg, kh, kw): (usize, usize, usize, usize),
    hf: usize,
    wf: usize,
) -> Result<Vec<f32>, String> {
    if w.len() != m * cg * kh * kw || kh > hf || kw > wf {
        return Err("filter does not fit the FFT grid".into());
    }
    let pl = plane_len(hf, wf);
    let scale = 1.0 / (hf * wf) as f32;
    let mut out = Vec::with_capacity(m * cg * pl * 2);
    let mut plane = vec![Complex::<f32>::default(); pl];
    PLANS.with(|p| -> Result<(), String> {
        let mut p = p.try_borrow_mut().map_err(|e| e.to_string())?;
        for f in w.chunks_exact(kh * kw) {
            forward(&mut p, f, kh, kw, 0, 0, hf, wf, &mut plane)?;
            for z in &plane {
                out.push(z.re * scale);
                out.push(-z.im * scale);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Workspace bytes [`dnnc_fft_conv`] needs: the `cg` input spectra plus
/// one accumulator plane.
pub fn workspace_bytes(cg: usize, hf: usize, wf: usize) -> usize {
    (cg + 1) * plane_len(hf, wf) * 8
}

/// One (image, group) of an FFT convolution, without bias or epilogue:
/// `y[mo][oh][ow] = sum_ci sum_ij x[ci][oh+i-pt][ow+j-pl] * w[mo][ci][i][j]`.
///
/// `desc` holds [`DESC_LEN`] values `cg, mg, h, w, pt, pl, hf, wf, oh, ow`;
/// `x` is `cg` planes of `h x w`, `spec` the group's part of
/// [`filter_spectrum`], `y` `mg` planes of `oh x ow`, `ws` at least
/// [`workspace_bytes`]. Returns 0, or 1 when a transform failed (never
/// unwinds into generated code).
///
/// # Safety
/// Every pointer must address the sizes `desc` implies; `y` and `ws` must
/// not overlap anything else.
pub unsafe extern "C" fn dnnc_fft_conv(
    desc: *const i64,
    x: *const f32,
    spec: *const f32,
    y: *mut f32,
    ws: *mut f32,
) -> i32 {
    let d: Vec<usize> = std::slice::from_raw_parts(desc, DESC_LEN)
        .iter()
        .map(|&v| v.max(0) as usize)
        .collect();
    let [cg, mg, h, w, pt, pl, hf, wf, oh, ow] = d[..] else {
        return 1;
    };
    let plen = plane_len(hf, wf);
    let x = std::slice::from_raw_parts(x, cg * h * w);
    let spec = std::slice::from_raw_parts(spec as *const Complex<f32>, mg * cg * plen);
    let y = std::slice::from_raw_parts_mut(y, mg * oh * ow);
    let ws = std::slice::from_raw_parts_mut(ws as *mut Complex<f32>, (cg + 1) * plen);
    let run = || -> Result<(), String> {
        PLANS.with(|p| {
            let mut p = p.try_borrow_mut().map_err(|e| e.to_string())?;
            conv(
                &mut p,
                x,
                spec,
                y,
                ws,
                [cg, mg, h, w, pt, pl, hf, wf, oh, ow],
            )
        })
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        _ => 1,
    }
}

fn conv(
    p: &mut Plans,
    x: &[f32],
    spec: &[Complex<f32>],
    y: &mut [f32],
    ws: &mut [Complex<f32>],
    [cg, mg, h, w, pt, pl, hf, wf, oh, ow]: [usize; DESC_LEN],
) -> Result<(), String> {
    let plen = plane_len(hf, wf);
    let wc = wf / 2 + 1;
    let (xs, acc) = ws.split_at_mut(cg * plen);
    for (ci, out) in xs.chunks_exact_mut(plen).enumerate() {
        forward(
            p,
            &x[ci * h * w..(ci + 1) * h * w],
            h,
            w,
            pt,
            pl,
            hf,
            wf,
            out,
        )?;
    }
    let icol = p.complex.plan_fft_inverse(hf);
    let c2r = p.real.plan_fft_inverse(wf);
    p.scratch
        .resize(icol.get_inplace_scratch_len(), Complex::default());
    p.row.resize(wf, 0.0);
    p.spec_row.resize(wc, Complex::default());
    for mo in 0..mg {
        let acc = &mut acc[..plen];
        acc.fill(Complex::default());
        for ci in 0..cg {
            let s = &spec[(mo * cg + ci) * plen..(mo * cg + ci + 1) * plen];
            let xc = &xs[ci * plen..(ci + 1) * plen];
            for ((a, &u), &v) in acc.iter_mut().zip(xc).zip(s) {
                *a += u * v;
            }
        }
        icol.process_with_scratch(acc, &mut p.scratch);
        for r in 0..oh {
            for c in 0..wc {
                p.spec_row[c] = acc[c * hf + r];
            }
            // Real output: the DC (and Nyquist) terms have no imaginary part.
            p.spec_row[0].im = 0.0;
            if wf.is_multiple_of(2) {
                p.spec_row[wc - 1].im = 0.0;
            }
            c2r.process(&mut p.spec_row, &mut p.row)
                .map_err(|e| e.to_string())?;
            y[(mo * oh + r) * ow..(mo * oh + r + 1) * ow].copy_from_slice(&p.row[..ow]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smooth_sizes() {
        assert_eq!(smooth_size(7), 8);
        assert_eq!(smooth_size(58), 60);
        assert_eq!(smooth_size(31), 32);
        assert_eq!(smooth_size(1), 1);
    }

    #[test]
    fn fft_conv_matches_direct_with_padding() {
        let (cg, mg, h, w, kh, kw) = (2, 3, 7, 6, 3, 4);
        let (pt, pb, pl, pr) = (1, 2, 0, 1);
        let (oh, ow) = (h + pt + pb - kh + 1, w + pl + pr - kw + 1);
        let (hf, wf) = (smooth_size(h + pt + pb), smooth_size(w + pl + pr));
        let x: Vec<f32> = (0..cg * h * w)
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let wt: Vec<f32> = (0..mg * cg * kh * kw)
            .map(|i| ((i * 5) % 7) as f32 * 0.25 - 0.5)
            .collect();
        let spec = filter_spectrum(&wt, (mg, cg, kh, kw), hf, wf).unwrap();
        let desc = [cg, mg, h, w, pt, pl, hf, wf, oh, ow].map(|v| v as i64);
        let mut y = vec![0f32; mg * oh * ow];
        let mut ws = vec![0f32; workspace_bytes(cg, hf, wf) / 4];
        let rc = unsafe {
            dnnc_fft_conv(
                desc.as_ptr(),
                x.as_ptr(),
                spec.as_ptr(),
                y.as_mut_ptr(),
                ws.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        for mo in 0..mg {
            for r in 0..oh {
                for c in 0..ow {
                    let mut s = 0.0f32;
                    for ci in 0..cg {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (ih, iw) = (r + i, c + j);
                                if ih < pt || iw < pl || ih - pt >= h || iw - pl >= w {
                                    continue;
                                }
                                s += x[(ci * h + ih - pt) * w + iw - pl]
                                    * wt[((mo * cg + ci) * kh + i) * kw + j];
                            }
                        }
                    }
                    let got = y[(mo * oh + r) * ow + c];
                    assert!((got - s).abs() < 1e-3, "{mo},{r},{c}: {got} vs {s}");
                }
            }
        }
    }
}
