//! 3x3 max pooling of one NCHW plane with AVX-512, stride 2 (every stem
//! pool of the zoo: SqueezeNet, GoogLeNet, ResNet, ShuffleNet; GoogLeNet's
//! and SqueezeNet's later 3x3/2 pools) and stride 1 (GoogLeNet's
//! inception branch pools, 3x3/1 padded by one).
//!
//! The generated plane kernel is limited to Cranelift's 128-bit vectors
//! and works on a padded copy of the plane; a stride-2 window also needs
//! its even and odd columns apart, which costs it a shuffle per four
//! outputs. Stride 2: sixteen outputs of a row are `max(even, odd, next
//! even)` of the column-wise maxima of its (up to) three input rows, 32
//! columns and one more, picked by `vpermt2ps` from vectors loaded
//! straight from the rows. Stride 1: sixteen outputs are
//! `max(c, c + 1, c + 2)` of the column maxima of 16 columns and two more, walking down a
//! column block so each input vector is loaded once per block, the
//! window's three rows kept in registers. Lanes outside the row are
//! masked to `-inf`: the maximum of the window's valid taps, the padding
//! counting as `-inf`, as the generated padded plane computes it, with no
//! copy and nothing stored but the outputs.
//!
//! A plane holding a NaN is reported instead (return 1): `maxps` drops a
//! NaN in one operand, so the caller recomputes such a plane with its
//! exact code, which propagates NaNs as the interpreter does.

/// Widest input row [`dnnc_max_pool_3x3s2`] takes (a bound that keeps
/// the index arithmetic far from overflow; the kernel keeps no row).
pub const MAX_POOL_3X3S2_MAX_W: usize = 1 << 20;

/// Largest top or left padding [`dnnc_max_pool_3x3s2`] takes (a 3x3
/// window padded by more would have windows of padding only).
pub const MAX_POOL_3X3S2_MAX_PAD: usize = 2;

/// Whether [`dnnc_max_pool_3x3s2`] (`stride` 2) or
/// [`dnnc_max_pool_3x3s1`] (`stride` 1) computes a plane of `w` columns
/// with pads `pt`, `pl` and `ow` output columns on this machine.
pub fn max_pool_3x3_fits(stride: usize, w: usize, ow: usize, pt: usize, pl: usize) -> bool {
    super::avx512_vl()
        && (stride == 1 || stride == 2)
        && w > 0
        && w <= MAX_POOL_3X3S2_MAX_W
        && ow > 0
        && stride * (ow - 1) < w + 2 * pl
        && pt <= MAX_POOL_3X3S2_MAX_PAD
        && pl <= MAX_POOL_3X3S2_MAX_PAD
}

/// Output rows `r0..r1` of a 3x3 stride-2 max pool of one plane: input
/// `x` of `h` rows of `w` floats, output `y` of rows of `ow` floats
/// (row `r` at `y + r * ow`), top and left padding `pads & 0xffff` and
/// `pads >> 16`; windows reaching past the bottom or right edge take
/// their valid taps (ceil mode). Returns 0, 1 when an input row it read
/// holds a NaN (the rows it wrote are then to be recomputed), or 2 for a
/// geometry or machine it does not handle ([`max_pool_3x3_fits`]).
///
/// # Safety
/// `x` must hold `h * w` floats and `y` rows `r0..r1` of `ow` floats;
/// they must not overlap.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_max_pool_3x3s2(
    x: *const f32,
    y: *mut f32,
    h: i64,
    w: i64,
    ow: i64,
    pads: i64,
    r0: i64,
    r1: i64,
) -> i32 {
    pool::<2>(x, y, (h, w, ow), pads, (r0, r1))
}

/// [`dnnc_max_pool_3x3s2`] with stride 1: output row `r` from input rows
/// `r - pt .. r - pt + 3`, column `q` from `q - pl .. q - pl + 3`.
///
/// # Safety
/// As [`dnnc_max_pool_3x3s2`].
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_max_pool_3x3s1(
    x: *const f32,
    y: *mut f32,
    h: i64,
    w: i64,
    ow: i64,
    pads: i64,
    r0: i64,
    r1: i64,
) -> i32 {
    pool::<1>(x, y, (h, w, ow), pads, (r0, r1))
}

/// Both entries: the geometry checked, then the AVX-512 rows.
unsafe fn pool<const S: usize>(
    x: *const f32,
    y: *mut f32,
    (h, w, ow): (i64, i64, i64),
    pads: i64,
    (r0, r1): (i64, i64),
) -> i32 {
    let (pt, pl) = ((pads & 0xffff) as usize, (pads >> 16) as usize);
    let (Ok(h), Ok(w), Ok(ow), Ok(r0), Ok(r1)) = (
        usize::try_from(h),
        usize::try_from(w),
        usize::try_from(ow),
        usize::try_from(r0),
        usize::try_from(r1),
    ) else {
        return 2;
    };
    if !max_pool_3x3_fits(S, w, ow, pt, pl) {
        return 2;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if S == 1 {
            x86::rows_s1(x, y, (h, w, ow), (pt, pl), (r0, r1))
        } else {
            x86::rows(x, y, (h, w, ow), (pt, pl), (r0, r1))
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, y, h, r0, r1);
        2
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// The lanes of padded column block `k` (padded columns `16k..16k +
    /// 16`, input columns `16k - pl ..`) inside a row of `w`, and the
    /// block's first input column.
    #[inline(always)]
    fn block_lanes(k: usize, w: usize, pl: usize) -> (__mmask16, isize) {
        let c0 = 16 * k as isize - pl as isize;
        let lo = (-c0).clamp(0, 16) as u32;
        let hi = (w as isize - c0).clamp(0, 16) as u32;
        ((((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as __mmask16, c0)
    }

    /// See [`super::dnnc_max_pool_3x3s2`]; the caller checked the
    /// geometry. Written without closures: a closure does not inherit
    /// `target_feature`, and its intrinsics would be calls.
    ///
    /// Padded column `c` is input column `c - pl`. Output `q` is the
    /// maximum of padded columns `2q..2q + 3` of its rows' column
    /// maxima, so sixteen outputs take padded blocks `2t`, `2t + 1` and
    /// the first column of `2t + 2`: the even and odd columns of the
    /// first two, and the even ones shifted by one. Each block is loaded
    /// straight from the rows, its lanes outside the row masked to
    /// `-inf` (masked lanes do not fault), so nothing is stored but the
    /// outputs.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows(
        x: *const f32,
        y: *mut f32,
        (h, w, ow): (usize, usize, usize),
        (pt, pl): (usize, usize),
        (r0, r1): (usize, usize),
    ) -> i32 {
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        let blocks = ow.div_ceil(16);
        let otail: __mmask16 = if ow % 16 == 0 {
            0xffff
        } else {
            ((1u32 << (ow % 16)) - 1) as __mmask16
        };
        let mut nan: __mmask16 = 0;
        for r in r0..r1 {
            // The window's valid input rows, top to bottom.
            let top = (2 * r) as isize - pt as isize;
            let mut src = [x; 3];
            let mut n = 0;
            for i in 0..3 {
                let ri = top + i;
                if ri >= 0 && (ri as usize) < h {
                    src[n] = x.add(ri as usize * w);
                    n += 1;
                }
            }
            let out = y.add(r * ow);
            // Column maxima of padded block `k` into `$m`.
            macro_rules! block {
                ($k:expr) => {{
                    let (mask, c0) = block_lanes($k, w, pl);
                    let mut m = ninf;
                    if mask == 0xffff {
                        for &s in &src[..n] {
                            let v = _mm512_loadu_ps(s.offset(c0));
                            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, v);
                            m = _mm512_max_ps(m, v);
                        }
                    } else if mask != 0 {
                        for &s in &src[..n] {
                            let v = _mm512_mask_loadu_ps(ninf, mask, s.wrapping_offset(c0));
                            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(m, v);
                            m = _mm512_max_ps(m, v);
                        }
                    }
                    m
                }};
            }
            let mut a = block!(0usize);
            for t in 0..blocks {
                let b = block!(2 * t + 1);
                let c = block!(2 * t + 2);
                let e = _mm512_permutex2var_ps(a, even, b);
                let o = _mm512_permutex2var_ps(a, odd, b);
                let e2 = _mm512_permutex2var_ps(e, next, c);
                let m = _mm512_max_ps(_mm512_max_ps(e, o), e2);
                if t + 1 < blocks {
                    _mm512_storeu_ps(out.add(16 * t), m);
                } else {
                    _mm512_mask_storeu_ps(out.add(16 * t), otail, m);
                }
                a = c;
            }
        }
        i32::from(nan != 0)
    }

    /// See [`super::dnnc_max_pool_3x3s1`]; the caller checked the
    /// geometry. Output block `t` (outputs `16t..16t + 16` of a row) is
    /// `max(m, m >> 1, m >> 2)` of the column maxima `m` of padded blocks
    /// `t` and `t + 1` (padded column `c` is input column `c - pl`).
    /// Each block walks down the output rows with the window's three
    /// input rows of both blocks in registers, so every input vector is
    /// loaded once per block (rows outside the plane are `-inf`), and
    /// the NaN check is one compare per row of both blocks.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows_s1(
        x: *const f32,
        y: *mut f32,
        (h, w, ow): (usize, usize, usize),
        (pt, pl): (usize, usize),
        (r0, r1): (usize, usize),
    ) -> i32 {
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let next = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
        let next2 = _mm512_setr_epi32(2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17);
        let mut nan: __mmask16 = 0;
        if r0 >= r1 {
            return 0;
        }
        for t in 0..ow.div_ceil(16) {
            let (ma, ca) = block_lanes(t, w, pl);
            let (mb, cb) = block_lanes(t + 1, w, pl);
            let omask: __mmask16 = if 16 * (t + 1) <= ow {
                0xffff
            } else {
                ((1u32 << (ow - 16 * t)) - 1) as __mmask16
            };
            // Input row `ri` of both blocks (-inf outside the plane).
            macro_rules! load {
                ($ri:expr) => {{
                    let ri: isize = $ri;
                    if ri < 0 || ri as usize >= h {
                        (ninf, ninf)
                    } else {
                        let row = x.add(ri as usize * w);
                        let a = _mm512_mask_loadu_ps(ninf, ma, row.wrapping_offset(ca));
                        let b = _mm512_mask_loadu_ps(ninf, mb, row.wrapping_offset(cb));
                        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b);
                        (a, b)
                    }
                }};
            }
            let top = r0 as isize - pt as isize;
            let (mut a0, mut b0) = load!(top);
            let (mut a1, mut b1) = load!(top + 1);
            for r in r0..r1 {
                let (a2, b2) = load!(r as isize - pt as isize + 2);
                let ca = _mm512_max_ps(_mm512_max_ps(a0, a1), a2);
                let cb = _mm512_max_ps(_mm512_max_ps(b0, b1), b2);
                let s1 = _mm512_permutex2var_ps(ca, next, cb);
                let s2 = _mm512_permutex2var_ps(ca, next2, cb);
                let m = _mm512_max_ps(_mm512_max_ps(ca, s1), s2);
                _mm512_mask_storeu_ps(y.add(r * ow + 16 * t), omask, m);
                (a0, b0, a1, b1) = (a1, b1, a2, b2);
            }
        }
        i32::from(nan != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The window maximum over the valid taps, as the interpreter takes it.
    fn reference(
        x: &[f32],
        (h, w, oh, ow): (usize, usize, usize, usize),
        stride: usize,
        (pt, pl): (usize, usize),
    ) -> Vec<f32> {
        let mut y = vec![f32::NEG_INFINITY; oh * ow];
        for r in 0..oh {
            for q in 0..ow {
                for i in 0..3 {
                    for j in 0..3 {
                        let (a, b) = (
                            (stride * r + i) as isize - pt as isize,
                            (stride * q + j) as isize - pl as isize,
                        );
                        if a >= 0 && b >= 0 && (a as usize) < h && (b as usize) < w {
                            y[r * ow + q] = y[r * ow + q].max(x[a as usize * w + b as usize]);
                        }
                    }
                }
            }
        }
        y
    }

    /// Output size of a 3x3 pool, floor or ceil mode.
    fn out(size: usize, stride: usize, pad: usize, ceil: bool) -> usize {
        let span = size + 2 * pad - 3;
        if ceil {
            span.div_ceil(stride) + 1
        } else {
            span / stride + 1
        }
    }

    /// The entry point of `stride`.
    type Entry = unsafe extern "C" fn(*const f32, *mut f32, i64, i64, i64, i64, i64, i64) -> i32;

    fn entry(stride: usize) -> Entry {
        if stride == 1 {
            dnnc_max_pool_3x3s1
        } else {
            dnnc_max_pool_3x3s2
        }
    }

    #[test]
    fn matches_the_window_maximum_on_every_geometry() {
        if !crate::cpu::avx512_vl() {
            eprintln!("SKIPPED: no AVX-512 on this machine; the generated pool runs instead");
            return;
        }
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1 << 24) as f32 * 4.0 - 2.0 + 1e-3
        };
        let mut cases = 0;
        for stride in [1, 2] {
            for (h, w) in [
                (111, 111),
                (112, 112),
                (55, 55),
                (28, 28),
                (27, 27),
                (14, 14),
                (7, 9),
                (3, 3),
                (4, 33),
                (5, 16),
                (9, 17),
                (6, 31),
                (2, 32),
                (1, 5),
            ] {
                for (pt, pl) in [(0, 0), (1, 1), (0, 1), (2, 1), (1, 2)] {
                    for ceil in [false, true] {
                        if h + 2 * pt < 3 || w + 2 * pl < 3 {
                            continue;
                        }
                        let (oh, ow) = (out(h, stride, pt, ceil), out(w, stride, pl, ceil));
                        if !max_pool_3x3_fits(stride, w, ow, pt, pl) {
                            continue;
                        }
                        let x: Vec<f32> = (0..h * w).map(|_| next()).collect();
                        let want = reference(&x, (h, w, oh, ow), stride, (pt, pl));
                        let mut y = vec![0.0f32; oh * ow];
                        let pads = (pt | pl << 16) as i64;
                        // In two calls of row ranges, as a split pool runs.
                        let mid = oh / 2;
                        for (a, b) in [(0, mid), (mid, oh)] {
                            let rc = unsafe {
                                entry(stride)(
                                    x.as_ptr(),
                                    y.as_mut_ptr(),
                                    h as i64,
                                    w as i64,
                                    ow as i64,
                                    pads,
                                    a as i64,
                                    b as i64,
                                )
                            };
                            assert_eq!(rc, 0, "/{stride} {h}x{w} pads {pt},{pl} ceil {ceil}");
                        }
                        assert_eq!(y, want, "/{stride} {h}x{w} pads {pt},{pl} ceil {ceil}");
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 200, "{cases} geometries");
    }

    #[test]
    fn a_nan_in_the_plane_is_reported() {
        if !crate::cpu::avx512_vl() {
            eprintln!("SKIPPED: no AVX-512 on this machine; the generated pool runs instead");
            return;
        }
        let (h, w) = (9, 21);
        for (stride, oh, ow) in [(2, 4, 10), (1, 7, 19)] {
            for at in [0, 20, 5 * w + 16, h * w - 1] {
                let mut x = vec![1.0f32; h * w];
                x[at] = f32::NAN;
                let mut y = vec![0.0f32; oh * ow];
                let rc = unsafe {
                    entry(stride)(
                        x.as_ptr(),
                        y.as_mut_ptr(),
                        h as i64,
                        w as i64,
                        ow as i64,
                        0,
                        0,
                        oh as i64,
                    )
                };
                assert_eq!(rc, 1, "/{stride}: NaN at {at}");
            }
        }
    }

    #[test]
    fn geometries_it_cannot_take_are_refused() {
        let x = [0.0f32; 16];
        let mut y = [0.0f32; 16];
        for stride in [1, 2] {
            let call = |w: i64, ow: i64, pads: i64, y: &mut [f32]| unsafe {
                entry(stride)(x.as_ptr(), y.as_mut_ptr(), 1, w, ow, pads, 0, 1)
            };
            assert_eq!(call(0, 1, 0, &mut y), 2);
            assert_eq!(call(-4, 1, 0, &mut y), 2);
            assert_eq!(call(4, 1, 3, &mut y), 2);
            assert_eq!(
                call(4, 9, 0, &mut y),
                2,
                "an output column whose window starts past the row"
            );
        }
        assert!(!max_pool_3x3_fits(3, 8, 2, 0, 0), "stride 3");
    }
}
