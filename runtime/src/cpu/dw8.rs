//! Depthwise convolutions on NCHW data over channel-interleaved scratch:
//! the kernel for large windows on small feature maps (EfficientNet's
//! 5x5 convs on 28x28 to 7x7 maps), whose rows are too short for the
//! plane kernel's vectors along a row (a 7-wide row is one vector and
//! three single lanes, a stride-2 row a gather). A call unit is one block
//! of 8 channels of one image.
//!
//! Per unit, the block's 8 input planes are copied into a zero-padded
//! scratch `[row][col][8]` (8x8 transposes), so that one vector holds a
//! pixel's 8 channels. Then, per output row and run of up to 8 output
//! pixels, each pixel keeps one vector accumulator: per tap one filter
//! vector (the block's 8 weights of the tap) and one multiply-add per
//! pixel. The row is transposed back into the 8 output planes. The
//! filter is packed at compile time as `[block][ky][kx][8]`
//! ([`pack_filter`]).
//!
//! Each output is `bias + sum over (ky, kx) in that order` (fused
//! multiply-adds on AVX2+FMA; a product then an add in the portable
//! path), then clamped and activated as [`Epilogue`] describes, so
//! results do not depend on how units are split over threads. A residual
//! is not applied here: the code generator leaves it, and whatever
//! follows it, to the generic epilogue.

use super::group8::Group8Geom;
use super::pgemm::{activate, Epilogue};
use std::cell::RefCell;

/// Channels per interleaved block: one AVX2 vector.
pub const BLOCK: usize = 8;

/// Pixels of slack past the padded planes: a row of fewer than 8 input
/// columns is copied as 8 pixels, which may reach past the last row.
const SLACK_PX: usize = 8;

/// Padded input rows the scratch holds for the geometry: every row a tap
/// reaches, and every input row.
fn padded_rows(g: &Group8Geom) -> usize {
    ((g.oh - 1) * g.sh + g.kh).max(g.pt + g.h)
}

/// Padded input columns (as [`padded_rows`]).
fn padded_cols(g: &Group8Geom) -> usize {
    ((g.ow - 1) * g.sw + g.kw).max(g.pl + g.w)
}

/// Why geometry `g` is not computed here, if it is not (the descriptor is
/// the grouped-8 kernel's: both are a window over NCHW planes).
pub fn unfit(g: &Group8Geom) -> Option<&'static str> {
    if g.c == 0 || !g.c.is_multiple_of(BLOCK) {
        Some("channels must be whole blocks of 8")
    } else if g.sh == 0 || g.sw == 0 || g.kh == 0 || g.kw == 0 {
        Some("strides and filter extents must be positive")
    } else if g.oh == 0 || g.ow == 0 || g.h == 0 || g.w == 0 {
        Some("empty input or output")
    } else {
        None
    }
}

/// Units of `n` images: `n * c / 8`.
pub fn units(g: &Group8Geom, n: usize) -> usize {
    n * (g.c / BLOCK)
}

/// Packs a depthwise OIHW filter `[c][1][kh][kw]` as `[block][tap][8]`:
/// the block's 8 weights of one tap side by side.
pub fn pack_filter(w: &[f32], c: usize, taps: usize) -> Vec<f32> {
    let mut out = vec![0f32; c * taps];
    for ch in 0..c {
        let (b, l) = (ch / BLOCK, ch % BLOCK);
        for t in 0..taps {
            out[(b * taps + t) * BLOCK + l] = w[ch * taps + t];
        }
    }
    out
}

/// A thread's buffers, kept between calls: the interleaved padded planes
/// and one interleaved output row.
struct Scratch {
    planes: Vec<f32>,
    row: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            planes: Vec::new(),
            row: Vec::new(),
        })
    };
}

/// Computes units `u0..u1` (unit `img * c/8 + block`: channels `8 block ..
/// 8 block + 8` of image `img`) of the depthwise conv `geo` of filter `w`
/// (packed by [`pack_filter`]) over `x` into `y` (NCHW), with `ep`'s bias
/// (per channel), clamp and activation; `ep` may be null and must have no
/// residual. Returns 0, or 1 for a geometry (or residual) it does not
/// compute.
///
/// # Safety
/// `w`, `x`, `y`, `geo` (and `ep`'s pointers) must be valid for the
/// geometry and the images the units reach; units of one call must not
/// overlap another running call's.
#[no_mangle]
pub unsafe extern "C" fn dnnc_conv_dw8(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: *const Group8Geom,
    u0: usize,
    u1: usize,
    ep: *const Epilogue,
) -> i32 {
    conv(w, x, y, geo, (u0, u1), ep, super::avx2_fma())
}

/// [`dnnc_conv_dw8`] on the AVX2 path or the portable one.
unsafe fn conv(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: *const Group8Geom,
    (u0, u1): (usize, usize),
    ep: *const Epilogue,
    avx2: bool,
) -> i32 {
    let g = *geo;
    let ep = ep.as_ref();
    if unfit(&g).is_some() || ep.is_some_and(|e| !e.res.is_null()) {
        return 1;
    }
    let (hp, wp) = (padded_rows(&g), padded_cols(&g));
    let blocks = g.c / BLOCK;
    let taps = g.kh * g.kw;
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let s = &mut *s;
        if s.planes.len() < (hp * wp + SLACK_PX) * BLOCK {
            s.planes.resize((hp * wp + SLACK_PX) * BLOCK, 0.0);
        }
        if s.row.len() < g.ow.max(8) * BLOCK {
            s.row.resize(g.ow.max(8) * BLOCK, 0.0);
        }
        for u in u0..u1 {
            let (img, b) = (u / blocks, u % blocks);
            let ch0 = img * g.c + b * BLOCK;
            let xb = x.add(ch0 * g.h * g.w);
            let yb = y.add(ch0 * g.oh * g.ow);
            let wb = w.add(b * taps * BLOCK);
            let bias = ep
                .map(|e| e.bias)
                .filter(|p| !p.is_null())
                .map(|p| p.add(b * BLOCK));
            let unit = Unit { xb, wb, bias, yb };
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                x86::unit(&g, (hp, wp), unit, ep, s);
                continue;
            }
            let _ = avx2;
            portable_unit(&g, (hp, wp), unit, ep, s);
        }
    });
    0
}

/// Copies the block's 8 planes at `xb` into `s.planes` (interleaved,
/// zero-padded), lane by lane.
unsafe fn fill_portable(g: &Group8Geom, (hp, wp): (usize, usize), xb: *const f32, s: &mut Scratch) {
    s.planes[..hp * wp * BLOCK].fill(0.0);
    for l in 0..BLOCK {
        for r in 0..g.h {
            for c in 0..g.w {
                s.planes[((r + g.pt) * wp + c + g.pl) * BLOCK + l] =
                    *xb.add((l * g.h + r) * g.w + c);
            }
        }
    }
}

/// One unit's operands: its block's input planes, packed filter, bias
/// (8 floats, if any) and output planes.
#[derive(Clone, Copy)]
struct Unit {
    xb: *const f32,
    wb: *const f32,
    bias: Option<*const f32>,
    yb: *mut f32,
}

/// One unit without vector instructions: the same order of operations,
/// each multiply-add a product then an add.
unsafe fn portable_unit(
    g: &Group8Geom,
    (hp, wp): (usize, usize),
    Unit { xb, wb, bias, yb }: Unit,
    ep: Option<&Epilogue>,
    s: &mut Scratch,
) {
    fill_portable(g, (hp, wp), xb, s);
    let (lo, hi, act) = ep.map_or((f32::NEG_INFINITY, f32::INFINITY, 0), |e| {
        (e.lo, e.hi, e.act)
    });
    for oy in 0..g.oh {
        for ox in 0..g.ow {
            for l in 0..BLOCK {
                let mut acc = bias.map_or(0.0, |p| *p.add(l));
                for ky in 0..g.kh {
                    for kx in 0..g.kw {
                        let px = (oy * g.sh + ky) * wp + ox * g.sw + kx;
                        let wv = *wb.add((ky * g.kw + kx) * BLOCK + l);
                        acc += wv * s.planes[px * BLOCK + l];
                    }
                }
                let v = hi.min(lo.max(acc));
                *yb.add((l * g.oh + oy) * g.ow + ox) = activate(act, v);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{Group8Geom, Scratch, Unit, BLOCK, SLACK_PX};
    use crate::cpu::pgemm::x86::act8_n;
    use crate::cpu::pgemm::{Epilogue, ACT_SIGMOID, ACT_SILU};
    use std::arch::x86_64::*;

    /// Transposes 8 vectors (rows) in place: lane `j` of row `i` becomes
    /// lane `i` of row `j`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in crate::cpu) unsafe fn transpose8(r: &mut [__m256; 8]) {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        r[0] = _mm256_permute2f128_ps::<0x20>(u0, u4);
        r[1] = _mm256_permute2f128_ps::<0x20>(u1, u5);
        r[2] = _mm256_permute2f128_ps::<0x20>(u2, u6);
        r[3] = _mm256_permute2f128_ps::<0x20>(u3, u7);
        r[4] = _mm256_permute2f128_ps::<0x31>(u0, u4);
        r[5] = _mm256_permute2f128_ps::<0x31>(u1, u5);
        r[6] = _mm256_permute2f128_ps::<0x31>(u2, u6);
        r[7] = _mm256_permute2f128_ps::<0x31>(u3, u7);
    }

    /// Copies the block's 8 planes at `xb` into `s.planes`, interleaved
    /// and zero-padded, 8 columns at a time by a transpose. A row's last
    /// columns are the last 8 of the row (overlapping columns written
    /// twice with the same values), or, for a row of fewer than 8, 8
    /// floats read past the row (the next row's) whose pixels land in the
    /// padding, zeroed after the copy; a block's last input row, whose
    /// floats past its end may lie past the tensor, is copied lane by
    /// lane.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fill(g: &Group8Geom, (hp, wp): (usize, usize), xb: *const f32, s: &mut Scratch) {
        let sp = s.planes.as_mut_ptr();
        let z = _mm256_setzero_ps();
        let plane = g.h * g.w;
        let copy8 = |src: *const f32, dst: *mut f32| {
            let mut v = [z; 8];
            for (l, v) in v.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(src.add(l * plane));
            }
            transpose8(&mut v);
            for (j, v) in v.iter().enumerate() {
                _mm256_storeu_ps(dst.add(j * BLOCK), *v);
            }
        };
        for r in 0..g.h {
            let src = xb.add(r * g.w);
            let dst = sp.add(((r + g.pt) * wp + g.pl) * BLOCK);
            if g.w >= 8 {
                for c0 in (0..g.w - 7).step_by(8) {
                    copy8(src.add(c0), dst.add(c0 * BLOCK));
                }
                if !g.w.is_multiple_of(8) {
                    copy8(src.add(g.w - 8), dst.add((g.w - 8) * BLOCK));
                }
            } else if r + 1 < g.h {
                copy8(src, dst);
            } else {
                for c in 0..g.w {
                    for l in 0..BLOCK {
                        *dst.add(c * BLOCK + l) = *src.add(l * plane + c);
                    }
                }
            }
        }
        let zero_px = |from: usize, to: usize| {
            for p in from..to {
                _mm256_storeu_ps(sp.add(p * BLOCK), z);
            }
        };
        zero_px(0, g.pt * wp);
        for r in 0..g.h {
            let row = (r + g.pt) * wp;
            zero_px(row, row + g.pl);
            zero_px(row + g.pl + g.w, row + wp);
        }
        zero_px((g.pt + g.h) * wp, hp * wp + SLACK_PX);
    }

    /// Output pixels `ox0 .. ox0 + P` of row `oy` into `row`, interleaved:
    /// bias plus each tap's multiply-add in order, clamped, activated.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn run<const P: usize>(
        g: &Group8Geom,
        wp: usize,
        sp: *const f32,
        wb: *const f32,
        b: __m256,
        (lo, hi, act): (__m256, __m256, u32),
        (oy, ox0): (usize, usize),
        row: *mut f32,
    ) {
        let sw = g.sw;
        let mut acc = [b; P];
        for ky in 0..g.kh {
            let base = sp.add(((oy * g.sh + ky) * wp + ox0 * sw) * BLOCK);
            let wr = wb.add(ky * g.kw * BLOCK);
            for kx in 0..g.kw {
                let wv = _mm256_loadu_ps(wr.add(kx * BLOCK));
                let at = base.add(kx * BLOCK);
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(at.add(j * sw * BLOCK)), *a);
                }
            }
        }
        for a in acc.iter_mut() {
            *a = _mm256_min_ps(hi, _mm256_max_ps(lo, *a));
        }
        match act {
            ACT_SIGMOID => acc = act8_n::<ACT_SIGMOID, P>(acc),
            ACT_SILU => acc = act8_n::<ACT_SILU, P>(acc),
            _ => {}
        }
        for (j, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(row.add((ox0 + j) * BLOCK), *a);
        }
    }

    /// One unit (see the module docs).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn unit(
        g: &Group8Geom,
        (hp, wp): (usize, usize),
        Unit { xb, wb, bias, yb }: Unit,
        ep: Option<&Epilogue>,
        s: &mut Scratch,
    ) {
        fill(g, (hp, wp), xb, s);
        let b = bias.map_or(_mm256_setzero_ps(), |p| _mm256_loadu_ps(p));
        let (lo, hi, act) = ep.map_or((f32::NEG_INFINITY, f32::INFINITY, 0), |e| {
            (e.lo, e.hi, e.act)
        });
        let epv = (_mm256_set1_ps(lo), _mm256_set1_ps(hi), act);
        let sp = s.planes.as_ptr();
        let row = s.row.as_mut_ptr();
        let oplane = g.oh * g.ow;
        for oy in 0..g.oh {
            let mut ox = 0;
            while ox < g.ow {
                let at = (oy, ox);
                match g.ow - ox {
                    1 => run::<1>(g, wp, sp, wb, b, epv, at, row),
                    2 => run::<2>(g, wp, sp, wb, b, epv, at, row),
                    3 => run::<3>(g, wp, sp, wb, b, epv, at, row),
                    4 => run::<4>(g, wp, sp, wb, b, epv, at, row),
                    5 => run::<5>(g, wp, sp, wb, b, epv, at, row),
                    6 => run::<6>(g, wp, sp, wb, b, epv, at, row),
                    7 => run::<7>(g, wp, sp, wb, b, epv, at, row),
                    _ => run::<8>(g, wp, sp, wb, b, epv, at, row),
                }
                ox += 8;
            }
            // The row back into the 8 planes, 8 columns at a time by a
            // transpose: a row's last columns as the last 8 (overlapping
            // columns written twice with the same values), or, for a row
            // of fewer than 8, 8 floats into the next row, which is
            // written after; a plane's last row of fewer than 8 columns
            // lane by lane.
            let dst = yb.add(oy * g.ow);
            let store8 = |c0: usize| {
                let mut v = [_mm256_setzero_ps(); 8];
                for (j, v) in v.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(row.add((c0 + j) * BLOCK));
                }
                transpose8(&mut v);
                for (l, v) in v.iter().enumerate() {
                    _mm256_storeu_ps(dst.add(l * oplane + c0), *v);
                }
            };
            if g.ow >= 8 {
                for c0 in (0..g.ow - 7).step_by(8) {
                    store8(c0);
                }
                if !g.ow.is_multiple_of(8) {
                    store8(g.ow - 8);
                }
            } else if oy + 1 < g.oh {
                store8(0);
            } else {
                for c in 0..g.ow {
                    for l in 0..BLOCK {
                        *dst.add(l * oplane + c) = *row.add(c * BLOCK + l);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::pgemm::{ACT_NONE, ACT_SIGMOID, ACT_SILU};

    /// The definition in f64: `y[c][oy][ox] = bias[c] + sum over taps of
    /// w[c][ky][kx] x[c][oy*sh+ky-pt][ox*sw+kx-pl]` (zero outside), clamped
    /// and activated.
    fn reference(
        g: &Group8Geom,
        n: usize,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        lohi: (f32, f32),
        act: u32,
    ) -> Vec<f64> {
        let mut y = vec![0f64; n * g.c * g.oh * g.ow];
        for img in 0..n {
            for c in 0..g.c {
                for oy in 0..g.oh {
                    for ox in 0..g.ow {
                        let mut acc = bias[c] as f64;
                        for ky in 0..g.kh {
                            for kx in 0..g.kw {
                                let iy = (oy * g.sh + ky) as isize - g.pt as isize;
                                let ix = (ox * g.sw + kx) as isize - g.pl as isize;
                                if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                                    continue;
                                }
                                let xv =
                                    x[((img * g.c + c) * g.h + iy as usize) * g.w + ix as usize];
                                acc += w[(c * g.kh + ky) * g.kw + kx] as f64 * xv as f64;
                            }
                        }
                        let v = acc.max(lohi.0 as f64).min(lohi.1 as f64);
                        let s = 1.0 / (1.0 + (-v).exp());
                        y[((img * g.c + c) * g.oh + oy) * g.ow + ox] = match act {
                            ACT_SIGMOID => s,
                            ACT_SILU => v * s,
                            _ => v,
                        };
                    }
                }
            }
        }
        y
    }

    fn geom(
        c: usize,
        (h, w): (usize, usize),
        (kh, kw): (usize, usize),
        s: usize,
        pad: usize,
    ) -> Group8Geom {
        Group8Geom {
            c,
            h,
            w,
            oh: (h + 2 * pad - kh) / s + 1,
            ow: (w + 2 * pad - kw) / s + 1,
            kh,
            kw,
            sh: s,
            sw: s,
            pt: pad,
            pl: pad,
        }
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut st = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
        (0..len)
            .map(|_| {
                st = st.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (st >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Both paths against the f64 definition over strides 1 and 2, 1x1 to
    /// 5x5 filters, maps narrower and wider than a vector (remainder
    /// columns on both transposes), split units, clamps and activations.
    #[test]
    fn matches_definition() {
        let cases = [
            (geom(16, (14, 14), (5, 5), 1, 2), 2),
            (geom(8, (14, 14), (5, 5), 2, 2), 2),
            (geom(24, (7, 7), (3, 3), 1, 1), 1),
            (geom(8, (9, 19), (3, 3), 2, 1), 2),
            (geom(8, (5, 4), (1, 1), 1, 0), 1),
            (geom(16, (16, 16), (3, 3), 1, 0), 1),
        ];
        for (g, n) in cases {
            let x = values(n * g.c * g.h * g.w, 1);
            let w = values(g.c * g.kh * g.kw, 2);
            let bias = values(g.c, 3);
            let packed = pack_filter(&w, g.c, g.kh * g.kw);
            for (lohi, act) in [
                ((f32::NEG_INFINITY, f32::INFINITY), ACT_NONE),
                ((0.0, 6.0), ACT_NONE),
                ((f32::NEG_INFINITY, f32::INFINITY), ACT_SILU),
                ((f32::NEG_INFINITY, f32::INFINITY), ACT_SIGMOID),
            ] {
                let want = reference(&g, n, &x, &w, &bias, lohi, act);
                let ep = Epilogue {
                    bias: bias.as_ptr(),
                    lo: lohi.0,
                    hi: lohi.1,
                    act,
                    ..Epilogue::NONE
                };
                let paths: &[bool] = if crate::cpu::avx2_fma() {
                    &[false, true]
                } else {
                    &[false]
                };
                for &avx2 in paths {
                    let mut y = vec![f32::NAN; want.len()];
                    let u = units(&g, n);
                    let mid = u / 2;
                    for (a, b) in [(0, mid), (mid, u)] {
                        let rc = unsafe {
                            conv(
                                packed.as_ptr(),
                                x.as_ptr(),
                                y.as_mut_ptr(),
                                &g,
                                (a, b),
                                &ep,
                                avx2,
                            )
                        };
                        assert_eq!(rc, 0);
                    }
                    for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
                        assert!(
                            (got as f64 - want).abs() <= 1e-5 + 1e-5 * want.abs(),
                            "{g:?} avx2={avx2} act={act} at {i}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// A residual, or a geometry it does not compute, is an error code.
    #[test]
    fn refuses_what_it_does_not_compute() {
        let g = geom(8, (7, 7), (3, 3), 1, 1);
        let (x, w) = (vec![0f32; 8 * 49], vec![0f32; 8 * 9]);
        let mut y = vec![0f32; 8 * 49];
        let res = vec![0f32; 8 * 49];
        let ep = Epilogue {
            res: res.as_ptr(),
            ..Epilogue::NONE
        };
        let rc = unsafe { dnnc_conv_dw8(w.as_ptr(), x.as_ptr(), y.as_mut_ptr(), &g, 0, 1, &ep) };
        assert_eq!(rc, 1);
        let bad = Group8Geom { c: 12, ..g };
        let rc = unsafe {
            dnnc_conv_dw8(
                w.as_ptr(),
                x.as_ptr(),
                y.as_mut_ptr(),
                &bad,
                0,
                1,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 1);
    }
}
