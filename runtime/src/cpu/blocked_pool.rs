//! Max and average pooling on channel-blocked data (`data=nchw8c`): one
//! channel block's plane `[H][W][8]` into `[OH][OW][8]`, each pixel's
//! eight channels one vector, so a window is `KH x KW` vector loads and a
//! max (or add) each, with no lane shuffles. Called from generated code
//! per block and band of output rows; the pools of GoogLeNet-style
//! inception modules sit between blocked convs, and pooling in place
//! saves reordering the map out of the layout and back.
//!
//! Semantics are the interpreter's (`kernels::pool`): a max pool takes
//! the in-bounds taps only (padding never wins), a NaN tap wins and
//! stays; an average pool sums the in-bounds taps in (row, column) order
//! and divides by their count, or with `include_pad` by the taps inside
//! the padded input. The AVX2 and portable paths give bitwise the same
//! results.

/// Channels per block.
const B: usize = 8;

/// A pool's geometry, as generated code lays it out in a stack slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolGeom {
    /// Input rows.
    pub h: i64,
    /// Input columns.
    pub w: i64,
    /// Output rows.
    pub oh: i64,
    /// Output columns.
    pub ow: i64,
    /// Window rows.
    pub kh: i64,
    /// Window columns.
    pub kw: i64,
    /// Row stride.
    pub sh: i64,
    /// Column stride.
    pub sw: i64,
    /// Row dilation.
    pub dh: i64,
    /// Column dilation.
    pub dw: i64,
    /// Top padding.
    pub pt: i64,
    /// Left padding.
    pub pl: i64,
    /// Bottom padding (counted by `include_pad` only).
    pub pb: i64,
    /// Right padding (counted by `include_pad` only).
    pub pr: i64,
    /// 1: average pool; 0: max pool.
    pub avg: i64,
    /// 1: an average pool divides by the taps inside the padded input.
    pub include_pad: i64,
}

/// Channel-block planes `[p0, p1)`: plane `p` of the input, `[H][W][8]`,
/// at `x + p·H·W·8`, pooled into `[OH][OW][8]` at `y + p·OH·OW·8`. One
/// call takes a task's whole share, so its per-call set-up (the column
/// windows, the row maxima's buffer) is paid once, not per plane: small
/// planes (14x14) spent more on it than on pooling. Returns 0, or 2 for a
/// geometry it does not take (a size below 1, a reversed plane range).
///
/// # Safety
/// `g` must point to a [`PoolGeom`]; `x` and `y` must hold the planes and
/// must not overlap.
#[no_mangle]
pub unsafe extern "C" fn dnnc_pool_nchw8c(
    g: *const PoolGeom,
    x: *const f32,
    y: *mut f32,
    p0: i64,
    p1: i64,
) -> i32 {
    let g = *g;
    let positive = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.dh, g.dw]
        .iter()
        .all(|&v| v >= 1);
    let pads = [g.pt, g.pl, g.pb, g.pr].iter().all(|&v| v >= 0);
    if !positive || !pads || p0 < 0 || p0 > p1 {
        return 2;
    }
    let (xs, ys) = ((g.h * g.w) as usize * B, (g.oh * g.ow) as usize * B);
    let planes = (p0 as usize..p1 as usize).map(|p| (x.add(p * xs), y.add(p * ys)));
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        x86::planes(&g, planes);
        return 0;
    }
    for (xp, yp) in planes {
        portable(&g, xp, yp, 0, g.oh);
    }
    0
}

/// One window's taps along an axis: `(lo, hi, start, padded)` of
/// [`taps`].
type Taps = (i64, i64, i64, i64);

/// The taps `[lo, hi)` of the window at output position `o` along one
/// axis (stride `s`, dilation `d`, `k` taps, leading padding `pad0`) that
/// fall inside the input `0..n` (a contiguous range), their first input
/// index, and how many taps fall inside the padded input `..n + pad1`.
#[inline(always)]
fn taps(
    o: i64,
    (s, d, k): (i64, i64, i64),
    (pad0, pad1, n): (i64, i64, i64),
) -> (i64, i64, i64, i64) {
    let start = o * s - pad0;
    // First tap at or past 0; first tap at or past `n` (and `n + pad1`).
    let first_at = |bound: i64| {
        if start >= bound {
            0
        } else {
            ((bound - start + d - 1) / d).min(k)
        }
    };
    let lo = first_at(0);
    let hi = first_at(n).max(lo);
    let padded = first_at(n + pad1);
    (lo, hi, start, padded)
}

unsafe fn portable(g: &PoolGeom, x: *const f32, y: *mut f32, r0: i64, r1: i64) {
    for oy in r0..r1 {
        let (ylo, yhi, y0, ph) = taps(oy, (g.sh, g.dh, g.kh), (g.pt, g.pb, g.h));
        for ox in 0..g.ow {
            let (xlo, xhi, x0, pw) = taps(ox, (g.sw, g.dw, g.kw), (g.pl, g.pr, g.w));
            let out = y.add(((oy * g.ow + ox) as usize) * B);
            for l in 0..B {
                let mut acc = if g.avg != 0 { 0.0 } else { f32::NEG_INFINITY };
                for ky in ylo..yhi {
                    let iy = y0 + ky * g.dh;
                    for kx in xlo..xhi {
                        let ix = x0 + kx * g.dw;
                        let v = *x.add(((iy * g.w + ix) as usize) * B + l);
                        if g.avg != 0 {
                            acc += v;
                        } else if v > acc || v.is_nan() {
                            acc = v;
                        }
                    }
                }
                if g.avg != 0 {
                    let n = if g.include_pad != 0 {
                        ph * pw
                    } else {
                        (yhi - ylo) * (xhi - xlo)
                    };
                    acc /= n as f32;
                }
                *out.add(l) = acc;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{taps, PoolGeom, Taps, B};
    use std::arch::x86_64::*;

    /// Pixels a step: independent max (or add) chains in flight, where
    /// one pixel's nine taps were one latency-bound chain (~30 cycles an
    /// output vector).
    const Q: usize = 4;

    /// A max pool, separably: each input row's window maxima along the
    /// row once (`hmax`), then each output the max of its rows' — an
    /// input row serves every output row whose window holds it (three
    /// for a 3x3 stride-1 pool). `max(v, acc)` is exact and keeps the
    /// first of equal values, so the result is the direct walk's unless
    /// a tap is NaN: the plane then runs the direct walk instead, which
    /// keeps the last NaN tap. Returns whether it ran.
    /// Every plane of `planes`, the column windows computed once.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn planes(
        g: &PoolGeom,
        planes: impl Iterator<Item = (*const f32, *mut f32)>,
    ) {
        planes_on(g, planes, super::super::avx512_vl())
    }

    /// [`planes`], on the 16-lane kernels when `wide` (tests run the
    /// 8-lane ones on machines with both).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn planes_on(
        g: &PoolGeom,
        planes: impl Iterator<Item = (*const f32, *mut f32)>,
        wide: bool,
    ) {
        let cols: Vec<_> = (0..g.ow)
            .map(|ox| taps(ox, (g.sw, g.dw, g.kw), (g.pl, g.pr, g.w)))
            .collect();
        let wins: Vec<_> = (0..g.oh)
            .map(|oy| taps(oy, (g.sh, g.dh, g.kh), (g.pt, g.pb, g.h)))
            .collect();
        let mut hmax = Vec::new();
        for (x, y) in planes {
            if g.avg == 0 {
                let done = if wide && same_3x3(g) {
                    same_3x3_512(g, x, y)
                } else if wide && halving_3x3(g) {
                    halving_512::<3>(g, x, y)
                } else if wide && halving_2x2(g) {
                    halving_512::<2>(g, x, y)
                } else if same_3x3(g) {
                    same_3x3_256(g, x, y)
                } else if halving_3x3(g) {
                    halving_256::<3>(g, &mut hmax, x, y)
                } else if halving_2x2(g) {
                    halving_256::<2>(g, &mut hmax, x, y)
                } else if wide {
                    separable_max_512(g, (&wins, &cols), &mut hmax, x, y)
                } else {
                    separable_max(g, (&wins, &cols), &mut hmax, x, y)
                };
                if done {
                    continue;
                }
            }
            rows(g, (&wins, &cols), x, y);
        }
    }

    /// A 3x3 stride-1 max pool padding one pixel on every side (so the
    /// map keeps its size): the inception modules' pool branches.
    fn same_3x3(g: &PoolGeom) -> bool {
        (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
            && (g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1)
            && (g.oh, g.ow) == (g.h, g.w)
    }

    /// Vectors (two pixels each) in a column group of [`same_3x3_512`].
    const GROUP: usize = 4;

    /// [`same_3x3`] pools, a column group of [`GROUP`] vectors at a time
    /// down the plane: each input row is loaded once, its window maxima
    /// along the row formed in registers (the neighbouring pixels by
    /// lane shifts), and kept for the next two output rows. The taps are
    /// combined in the definition's (row, column) order, keeping the
    /// first of equal values, so the results are bitwise the other paths'
    /// (absent taps are `-inf`, which `max(v, -inf)` passes over). Returns
    /// false, having written garbage, when a tap is NaN: the caller then
    /// runs the direct walk. 528 x 14 x 14: 44 -> 13.5 us, the plain
    /// kernel on the same map 23 us; 256 x 28 x 28: 85 -> 29 us (plain
    /// 41); 480 x 28 x 28, which streams from L2: 114 us (plain 108).
    /// (`cargo run --release -p dnnc-runtime --example blocked_pool --
    /// C H W [STRIDE]`.)
    #[target_feature(enable = "avx512f")]
    unsafe fn same_3x3_512(g: &PoolGeom, x: *const f32, y: *mut f32) -> bool {
        let (h, w) = (g.h as usize, g.w as usize);
        // Vectors per row; an odd width's last one holds one pixel.
        let vecs = w.div_ceil(2);
        let mut nan: __mmask16 = 0;
        for g0 in (0..vecs).step_by(GROUP) {
            let at = (x, y, h, w, g0);
            nan |= match vecs - g0 {
                1 => same_3x3_group::<1>(at),
                2 => same_3x3_group::<2>(at),
                3 => same_3x3_group::<3>(at),
                _ => same_3x3_group::<GROUP>(at),
            };
        }
        nan == 0
    }

    /// The `N` vectors of a plane's column group from vector `g0`, down
    /// every row (see [`same_3x3_512`]): the unordered-compare mask of
    /// the taps loaded.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn same_3x3_group<const N: usize>(
        (x, y, h, w, g0): (*const f32, *mut f32, usize, usize, usize),
    ) -> __mmask16 {
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let vecs = w.div_ceil(2);
        let half = |v: usize| 2 * v + 1 == w;
        let mut nan: __mmask16 = 0;
        // Vector `v` of row `r` (`-inf` past the row's end).
        let load = |r: usize, v: usize| {
            let p = x.add((r * w + 2 * v) * B);
            if half(v) {
                _mm512_mask_loadu_ps(ninf, 0x00ff, p)
            } else {
                _mm512_loadu_ps(p)
            }
        };
        let shift = |hi: __m512, lo: __m512| {
            _mm512_castsi512_ps(_mm512_alignr_epi32::<8>(
                _mm512_castps_si512(hi),
                _mm512_castps_si512(lo),
            ))
        };
        // Row `r`'s window maxima along the row, for the group.
        let hrow = |r: usize, nan: &mut __mmask16| {
            let mut c = [ninf; GROUP + 2];
            if g0 > 0 {
                c[0] = load(r, g0 - 1);
            }
            for i in 0..N {
                c[i + 1] = load(r, g0 + i);
            }
            if g0 + N < vecs {
                c[N + 1] = load(r, g0 + N);
            }
            for i in (0..N).step_by(2) {
                let j = (i + 1).min(N - 1);
                *nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(c[i + 1], c[j + 1]);
            }
            let mut m = [ninf; N];
            for i in 0..N {
                // Pixels (2v - 1, 2v), (2v, 2v + 1), (2v + 1, 2v + 2).
                let (left, cur, right) =
                    (shift(c[i + 1], c[i]), c[i + 1], shift(c[i + 2], c[i + 1]));
                m[i] = _mm512_max_ps(right, _mm512_max_ps(cur, left));
            }
            m
        };
        let mut top = [ninf; N];
        let mut mid = hrow(0, &mut nan);
        for oy in 0..h {
            let bot = if oy + 1 < h {
                hrow(oy + 1, &mut nan)
            } else {
                [ninf; N]
            };
            for i in 0..N {
                let m = _mm512_max_ps(bot[i], _mm512_max_ps(mid[i], top[i]));
                let p = y.add((oy * w + 2 * (g0 + i)) * B);
                if half(g0 + i) {
                    _mm512_mask_storeu_ps(p, 0x00ff, m);
                } else {
                    _mm512_storeu_ps(p, m);
                }
            }
            (top, mid) = (mid, bot);
        }
        nan
    }

    /// A 3x3 stride-2 max pool without leading padding (windows past the
    /// end, as ceil mode makes, are cut): GoogLeNet's pools between
    /// stages.
    fn halving_3x3(g: &PoolGeom) -> bool {
        (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (3, 3, 2, 2, 1, 1) && halving(g)
    }

    /// A 2x2 stride-2 max pool as [`halving_3x3`] takes them.
    fn halving_2x2(g: &PoolGeom) -> bool {
        (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw) == (2, 2, 2, 2, 1, 1) && halving(g)
    }

    /// A stride-2 pool's windows all start inside the map, with no
    /// leading padding.
    fn halving(g: &PoolGeom) -> bool {
        (g.pt, g.pl) == (0, 0) && 2 * (g.oh - 1) < g.h && 2 * (g.ow - 1) < g.w
    }

    /// [`halving_3x3`] (`K` = 3) and [`halving_2x2`] (`K` = 2) pools as
    /// [`same_3x3_512`] runs its pools: output pixels `2u` and `2u + 1`
    /// take input pixels from `4u` on, whose `K` taps each are gathered
    /// from the input vectors by 128-bit lane shuffles; each input row is
    /// loaded once, and with three taps the last row of an output row's
    /// window is the first of the next's. 192 x 56 x 56:
    /// 204 -> 104 us (the plain kernel 110 us); 480 x 28 x 28: 35 us
    /// (plain 75); 832 x 14 x 14: 13 us (plain 56).
    #[target_feature(enable = "avx512f")]
    unsafe fn halving_512<const K: usize>(g: &PoolGeom, x: *const f32, y: *mut f32) -> bool {
        let ovecs = (g.ow as usize).div_ceil(2);
        let mut nan: __mmask16 = 0;
        for u0 in (0..ovecs).step_by(GROUP) {
            let at = (x, y, g, u0);
            nan |= match ovecs - u0 {
                1 => halving_group::<K, 1>(at),
                2 => halving_group::<K, 2>(at),
                3 => halving_group::<K, 3>(at),
                _ => halving_group::<K, GROUP>(at),
            };
        }
        nan == 0
    }

    /// The `N` output vectors of a column group from output vector `u0`,
    /// down every output row (see [`halving_512`]): the
    /// unordered-compare mask of the taps loaded.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn halving_group<const K: usize, const N: usize>(
        (x, y, g, u0): (*const f32, *mut f32, &PoolGeom, usize),
    ) -> __mmask16 {
        let (h, w, oh, ow) = (g.h as usize, g.w as usize, g.oh as usize, g.ow as usize);
        let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut nan: __mmask16 = 0;
        // Input vector `v` of row `r`: pixels 2v and 2v + 1, `-inf` past
        // the row's end.
        let load = |r: usize, v: usize| {
            let p = x.add((r * w + 2 * v) * B);
            if 2 * v + 1 < w {
                _mm512_loadu_ps(p)
            } else if 2 * v < w {
                _mm512_mask_loadu_ps(ninf, 0x00ff, p)
            } else {
                ninf
            }
        };
        // Row `r`'s window maxima along the row, for the group's outputs.
        let hrow = |r: usize, nan: &mut __mmask16| {
            let mut c = [ninf; 2 * GROUP + 1];
            // The vector past the group holds a third tap only.
            let vecs = 2 * N + usize::from(K == 3);
            for (k, c) in c.iter_mut().enumerate().take(vecs) {
                *c = load(r, 2 * u0 + k);
            }
            for k in 0..N {
                *nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(c[2 * k], c[2 * k + 1]);
            }
            if K == 3 {
                *nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(c[2 * N], c[2 * N]);
            }
            let mut m = [ninf; N];
            for (i, m) in m.iter_mut().enumerate() {
                let (a, b, c) = (c[2 * i], c[2 * i + 1], c[2 * i + 2]);
                // Taps 4u + {0, 1, 2} and 4u + {2, 3, 4}, a lane pair each.
                let t0 = _mm512_shuffle_f32x4::<0x44>(a, b);
                let t1 = _mm512_shuffle_f32x4::<0xee>(a, b);
                *m = _mm512_max_ps(t1, t0);
                if K == 3 {
                    let t2 = _mm512_shuffle_f32x4::<0x44>(b, c);
                    *m = _mm512_max_ps(t2, *m);
                }
            }
            m
        };
        let row_or_inf = |r: usize, nan: &mut __mmask16| {
            if r < h {
                hrow(r, nan)
            } else {
                [ninf; N]
            }
        };
        let mut top = hrow(0, &mut nan);
        for oy in 0..oh {
            if K == 2 && oy > 0 {
                top = hrow(2 * oy, &mut nan);
            }
            let mid = row_or_inf(2 * oy + 1, &mut nan);
            let bot = if K == 3 {
                row_or_inf(2 * oy + 2, &mut nan)
            } else {
                [ninf; N]
            };
            for i in 0..N {
                let m = _mm512_max_ps(mid[i], top[i]);
                let m = if K == 3 { _mm512_max_ps(bot[i], m) } else { m };
                let u = u0 + i;
                let p = y.add((oy * ow + 2 * u) * B);
                if 2 * u + 1 < ow {
                    _mm512_storeu_ps(p, m);
                } else {
                    _mm512_mask_storeu_ps(p, 0x00ff, m);
                }
            }
            top = bot;
        }
        nan
    }

    /// Pixels (one ymm each) in a column group of [`same_3x3_256`].
    const GROUP_256: usize = 4;

    /// [`same_3x3_512`] on 8 lanes: one pixel a vector, so a pixel's
    /// neighbours along the row are the next vectors, no lane shifts.
    /// The taps are combined in the definition's (row, column) order, so
    /// the results are bitwise the other paths'; returns false, having
    /// written garbage, when a tap is NaN. Through the separable path
    /// (a NaN scan of the plane, then its row maxima through memory)
    /// GoogLeNet's inception pools ran ~25% behind onnxruntime's.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn same_3x3_256(g: &PoolGeom, x: *const f32, y: *mut f32) -> bool {
        let w = g.w as usize;
        let mut nan = _mm256_setzero_ps();
        for g0 in (0..w).step_by(GROUP_256) {
            let at = (x, y, g, g0);
            let n = match w - g0 {
                1 => same_3x3_group_256::<1>(at),
                2 => same_3x3_group_256::<2>(at),
                3 => same_3x3_group_256::<3>(at),
                _ => same_3x3_group_256::<GROUP_256>(at),
            };
            nan = _mm256_or_ps(nan, n);
        }
        _mm256_movemask_ps(nan) == 0
    }

    /// The `N` pixels of a plane's column group from pixel `g0`, down
    /// every row (see [`same_3x3_256`]): the unordered-compare mask of
    /// the group's taps.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn same_3x3_group_256<const N: usize>(
        (x, y, g, g0): (*const f32, *mut f32, &PoolGeom, usize),
    ) -> __m256 {
        let (h, w) = (g.h as usize, g.w as usize);
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut nan = _mm256_setzero_ps();
        // Row `r`'s window maxima along the row, for the group.
        let hrow = |r: usize, nan: &mut __m256| {
            let row = x.add(r * w * B);
            let mut c = [ninf; GROUP_256 + 2];
            if g0 > 0 {
                c[0] = _mm256_loadu_ps(row.add((g0 - 1) * B));
            }
            for i in 0..N {
                c[i + 1] = _mm256_loadu_ps(row.add((g0 + i) * B));
            }
            if g0 + N < w {
                c[N + 1] = _mm256_loadu_ps(row.add((g0 + N) * B));
            }
            for i in (0..N).step_by(2) {
                let j = (i + 1).min(N - 1);
                *nan = _mm256_or_ps(*nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(c[i + 1], c[j + 1]));
            }
            let mut m = [ninf; N];
            for (i, m) in m.iter_mut().enumerate() {
                *m = _mm256_max_ps(c[i + 2], _mm256_max_ps(c[i + 1], c[i]));
            }
            m
        };
        let mut top = [ninf; N];
        let mut mid = hrow(0, &mut nan);
        for oy in 0..h {
            let bot = if oy + 1 < h {
                hrow(oy + 1, &mut nan)
            } else {
                [ninf; N]
            };
            for i in 0..N {
                let m = _mm256_max_ps(bot[i], _mm256_max_ps(mid[i], top[i]));
                _mm256_storeu_ps(y.add((oy * w + g0 + i) * B), m);
            }
            (top, mid) = (mid, bot);
        }
        nan
    }

    /// [`halving_512`] on 8 lanes, row by row: output pixel `u` takes
    /// input pixels `2u` to `2u + K - 1`, one vector each. Output row
    /// `oy` reads input rows `2oy` to `2oy + K - 1` front to back; with
    /// three taps the window maxima along its last row are kept (`top`,
    /// one row of vectors) as the first row of the next output row's. The
    /// taps are combined in the definition's (row, column) order, so the
    /// results are bitwise the other paths'; returns false, having
    /// written garbage, when a tap is NaN. GoogLeNet's 192 x 56 x 56 pool
    /// (in the model, one thread): 224 us through the separable path (a
    /// NaN scan of the plane, then its row maxima through memory), 189
    /// walking column groups of four down the plane, onnxruntime 124.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn halving_256<const K: usize>(
        g: &PoolGeom,
        top: &mut Vec<f32>,
        x: *const f32,
        y: *mut f32,
    ) -> bool {
        let (h, w, oh, ow) = (g.h as usize, g.w as usize, g.oh as usize, g.ow as usize);
        let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut nan = _mm256_setzero_ps();
        top.resize(ow * B, 0.0);
        let top = top.as_mut_ptr();
        // Tap `t` of output pixel `u` in row `r` (`-inf` past the row's
        // end or below the map), its NaN test folded into `nan`.
        let tap = |r: usize, u: usize, t: usize, nan: &mut __m256| {
            let px = 2 * u + t;
            if r < h && px < w {
                let v = _mm256_loadu_ps(x.add((r * w + px) * B));
                *nan = _mm256_or_ps(*nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
                v
            } else {
                ninf
            }
        };
        // The window maximum of output pixel `u` along row `r`.
        let hmax = |r: usize, u: usize, nan: &mut __m256| {
            let m = _mm256_max_ps(tap(r, u, 1, nan), tap(r, u, 0, nan));
            if K == 3 {
                _mm256_max_ps(tap(r, u, 2, nan), m)
            } else {
                m
            }
        };
        for u in 0..ow {
            _mm256_storeu_ps(top.add(u * B), hmax(0, u, &mut nan));
        }
        for oy in 0..oh {
            let out = y.add(oy * ow * B);
            for u in 0..ow {
                let t = if K == 2 && oy > 0 {
                    hmax(2 * oy, u, &mut nan)
                } else {
                    _mm256_loadu_ps(top.add(u * B))
                };
                let m = _mm256_max_ps(hmax(2 * oy + 1, u, &mut nan), t);
                let m = if K == 3 {
                    let bot = hmax(2 * oy + 2, u, &mut nan);
                    _mm256_storeu_ps(top.add(u * B), bot);
                    _mm256_max_ps(bot, m)
                } else {
                    m
                };
                _mm256_storeu_ps(out.add(u * B), m);
            }
        }
        _mm256_movemask_ps(nan) == 0
    }

    /// The input rows the output rows read, `[iy0, iy1)`, from their
    /// windows' taps (`wins`).
    fn rows_read(g: &PoolGeom, wins: &[Taps]) -> (i64, i64) {
        let (ylo0, _, y00, _) = wins[0];
        let (_, yhi1, y01, _) = wins[(g.oh - 1) as usize];
        let iy0 = y00 + ylo0 * g.dh;
        (iy0, (y01 + (yhi1 - 1) * g.dh + 1).max(iy0))
    }

    /// The columns whose whole window lies inside the row, `[f0, f1)`
    /// (contiguous), as a pair.
    fn full_cols(g: &PoolGeom, cols: &[Taps]) -> (usize, usize) {
        let full = |c: &Taps| c.0 == 0 && c.1 == g.kw;
        let f0 = cols.iter().position(full).unwrap_or(cols.len());
        (f0, f0 + cols[f0..].iter().take_while(|c| full(c)).count())
    }

    /// [`separable_max`] with 16-lane vectors, two pixels each: the NaN
    /// scan, a stride-1 row's full windows and the maxima of rows run two
    /// pixels an instruction; a stride-2 row's windows and the windows
    /// cut by the padding run a pixel at a time. The same maxima in the
    /// same order, so bitwise the 8-lane path's results. On a 3x3
    /// stride-1 pool over 528 x 14 x 14 (before [`same_3x3_512`] took
    /// those): 44 -> 36 us, the plain kernel 24 us.
    #[target_feature(enable = "avx512f,avx512vl")]
    unsafe fn separable_max_512(
        g: &PoolGeom,
        (wins, cols): (&[Taps], &[Taps]),
        hmax: &mut Vec<f32>,
        x: *const f32,
        y: *mut f32,
    ) -> bool {
        let (iy0, iy1) = rows_read(g, wins);
        let ow = g.ow as usize;
        hmax.resize((iy1 - iy0) as usize * ow * B, 0.0);
        // Any NaN among the rows read sends the plane to the direct walk:
        // one unordered compare covers two vectors.
        let read = x.add((iy0 * g.w) as usize * B);
        let len = ((iy1 - iy0) * g.w) as usize * B;
        let mut nan: __mmask16 = 0;
        let mut i = 0;
        while i + 32 <= len {
            let (a, b) = (
                _mm512_loadu_ps(read.add(i)),
                _mm512_loadu_ps(read.add(i + 16)),
            );
            nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b);
            i += 32;
        }
        while i < len {
            let a = _mm256_loadu_ps(read.add(i));
            nan |= _mm256_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) as __mmask16;
            i += B;
        }
        if nan != 0 {
            return false;
        }
        let cs = g.dw as usize * B;
        // The columns of three-tap windows inside the row walk straight
        // through, `[f0, f1)`; the others take their taps one by one.
        let (f0, f1) = if g.kw == 3 {
            full_cols(g, cols)
        } else {
            (0, 0)
        };
        let step = g.sw as usize * B;
        for iy in iy0..iy1 {
            let row = x.add((iy * g.w) as usize * B);
            let hrow = hmax.as_mut_ptr().add((iy - iy0) as usize * ow * B);
            if f1 > f0 {
                let mut p = row.add(cols[f0].2 as usize * B);
                let mut ox = f0;
                if g.sw == 1 {
                    // Pixels ox and ox + 1 in one vector: their taps are
                    // adjacent too.
                    while ox + 2 <= f1 {
                        let m = _mm512_loadu_ps(p);
                        let m = _mm512_max_ps(_mm512_loadu_ps(p.add(cs)), m);
                        let m = _mm512_max_ps(_mm512_loadu_ps(p.add(2 * cs)), m);
                        _mm512_storeu_ps(hrow.add(ox * B), m);
                        p = p.add(2 * B);
                        ox += 2;
                    }
                }
                while ox < f1 {
                    let m = _mm256_loadu_ps(p);
                    let m = _mm256_max_ps(_mm256_loadu_ps(p.add(cs)), m);
                    let m = _mm256_max_ps(_mm256_loadu_ps(p.add(2 * cs)), m);
                    _mm256_storeu_ps(hrow.add(ox * B), m);
                    p = p.add(step);
                    ox += 1;
                }
            }
            for ox in (0..f0).chain(f1..ow) {
                let (xlo, xhi, x0, _) = cols[ox];
                let first = row.add((x0 + xlo * g.dw) as usize * B);
                let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
                for j in 0..(xhi - xlo) as usize {
                    acc = _mm256_max_ps(_mm256_loadu_ps(first.add(j * cs)), acc);
                }
                _mm256_storeu_ps(hrow.add(ox * B), acc);
            }
        }
        let rstride = (g.dh as usize) * ow * B;
        let n = ow * B;
        for oy in 0..g.oh {
            let (ylo, yhi, y0, _) = wins[oy as usize];
            let out = y.add((oy * g.ow) as usize * B);
            let top = hmax
                .as_ptr()
                .add((y0 + ylo * g.dh - iy0).max(0) as usize * ow * B);
            let rows = (yhi - ylo) as usize;
            let mut o = 0;
            while o + 16 <= n {
                let mut m = _mm512_loadu_ps(top.add(o));
                for r in 1..rows {
                    m = _mm512_max_ps(_mm512_loadu_ps(top.add(r * rstride + o)), m);
                }
                _mm512_storeu_ps(out.add(o), m);
                o += 16;
            }
            if o < n {
                let mut m = _mm256_loadu_ps(top.add(o));
                for r in 1..rows {
                    m = _mm256_max_ps(_mm256_loadu_ps(top.add(r * rstride + o)), m);
                }
                _mm256_storeu_ps(out.add(o), m);
            }
        }
        true
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn separable_max(
        g: &PoolGeom,
        (wins, cols): (&[Taps], &[Taps]),
        hmax: &mut Vec<f32>,
        x: *const f32,
        y: *mut f32,
    ) -> bool {
        let (r0, r1) = (0, g.oh);
        let (iy0, iy1) = rows_read(g, wins);
        let ow = g.ow as usize;
        hmax.resize((iy1 - iy0) as usize * ow * B, 0.0);
        // Any NaN among the rows read sends the plane to the direct walk
        // (a streaming check, off the max chains).
        let (mut n0, mut n1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let read = x.add((iy0 * g.w) as usize * B);
        let len = ((iy1 - iy0) * g.w) as usize;
        for i in (0..len / 2 * 2).step_by(2) {
            let (a, b) = (
                _mm256_loadu_ps(read.add(i * B)),
                _mm256_loadu_ps(read.add((i + 1) * B)),
            );
            n0 = _mm256_or_ps(n0, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a));
            n1 = _mm256_or_ps(n1, _mm256_cmp_ps::<_CMP_UNORD_Q>(b, b));
        }
        if len % 2 == 1 {
            let a = _mm256_loadu_ps(read.add((len - 1) * B));
            n0 = _mm256_or_ps(n0, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a));
        }
        if _mm256_movemask_ps(_mm256_or_ps(n0, n1)) != 0 {
            return false;
        }
        let cs = g.dw as usize * B;
        // The columns whose whole window lies inside the row: with three
        // taps they run as one pointer walk.
        let (f0, f1) = full_cols(g, cols);
        let walk = g.kw == 3 && f1 > f0;
        let lo = _mm256_set1_ps(f32::NEG_INFINITY);
        let step = g.sw as usize * B;
        for iy in iy0..iy1 {
            let row = x.add((iy * g.w) as usize * B);
            let hrow = hmax.as_mut_ptr().add((iy - iy0) as usize * ow * B);
            if walk {
                let mut p = row.add(cols[f0].2 as usize * B);
                for ox in f0..f1 {
                    let m = _mm256_max_ps(_mm256_loadu_ps(p), lo);
                    let m = _mm256_max_ps(_mm256_loadu_ps(p.add(cs)), m);
                    let m = _mm256_max_ps(_mm256_loadu_ps(p.add(2 * cs)), m);
                    _mm256_storeu_ps(hrow.add(ox * B), m);
                    p = p.add(step);
                }
            }
            for (ox, &(xlo, xhi, x0, _)) in cols.iter().enumerate() {
                if walk && (f0..f1).contains(&ox) {
                    continue;
                }
                let first = row.add((x0 + xlo * g.dw) as usize * B);
                let acc = match (xhi - xlo, g.kw) {
                    // A whole 3-tap window (the interior): straight-line.
                    (3, 3) => {
                        let v0 = _mm256_loadu_ps(first);
                        let v1 = _mm256_loadu_ps(first.add(cs));
                        let v2 = _mm256_loadu_ps(first.add(2 * cs));
                        let lo = _mm256_set1_ps(f32::NEG_INFINITY);
                        _mm256_max_ps(v2, _mm256_max_ps(v1, _mm256_max_ps(v0, lo)))
                    }
                    (nx, _) => {
                        let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
                        for j in 0..nx as usize {
                            acc = _mm256_max_ps(_mm256_loadu_ps(first.add(j * cs)), acc);
                        }
                        acc
                    }
                };
                _mm256_storeu_ps(hrow.add(ox * B), acc);
            }
        }
        let rstride = (g.dh as usize) * ow * B;
        for oy in r0..r1 {
            let (ylo, yhi, y0, _) = wins[oy as usize];
            let out = y.add((oy * g.ow) as usize * B);
            let top = hmax
                .as_ptr()
                .add((y0 + ylo * g.dh - iy0).max(0) as usize * ow * B);
            let lo = _mm256_set1_ps(f32::NEG_INFINITY);
            // Straight-line per pixel for two- and three-row windows (a
            // loop of three steps per pixel cost 20 cycles an output).
            match yhi - ylo {
                3 => {
                    let (a, b, c) = (top, top.add(rstride), top.add(2 * rstride));
                    for o in (0..ow * B).step_by(B) {
                        let m = _mm256_max_ps(_mm256_loadu_ps(a.add(o)), lo);
                        let m = _mm256_max_ps(_mm256_loadu_ps(b.add(o)), m);
                        let m = _mm256_max_ps(_mm256_loadu_ps(c.add(o)), m);
                        _mm256_storeu_ps(out.add(o), m);
                    }
                }
                2 => {
                    let (a, b) = (top, top.add(rstride));
                    for o in (0..ow * B).step_by(B) {
                        let m = _mm256_max_ps(_mm256_loadu_ps(a.add(o)), lo);
                        let m = _mm256_max_ps(_mm256_loadu_ps(b.add(o)), m);
                        _mm256_storeu_ps(out.add(o), m);
                    }
                }
                n => {
                    for ox in 0..ow {
                        let mut acc = lo;
                        for i in 0..n as usize {
                            acc =
                                _mm256_max_ps(_mm256_loadu_ps(top.add(i * rstride + ox * B)), acc);
                        }
                        _mm256_storeu_ps(out.add(ox * B), acc);
                    }
                }
            }
        }
        true
    }

    /// Every output row of one plane, each window walked directly.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows(g: &PoolGeom, (wins, cols): (&[Taps], &[Taps]), x: *const f32, y: *mut f32) {
        let (rs, cs) = ((g.dh * g.w) as usize * B, g.dw as usize * B);
        let step = g.sw as usize * B;
        for oy in 0..g.oh {
            let (ylo, yhi, y0, ph) = wins[oy as usize];
            let ny = (yhi - ylo) as usize;
            let out_row = y.add((oy * g.ow) as usize * B);
            let mut ox = 0;
            while ox < cols.len() {
                let (xlo, xhi, x0, pw) = cols[ox];
                // `Q` pixels whose windows have the same valid taps (the
                // interior) run together, the rest one by one.
                let q = if cols[ox..].len() >= Q
                    && cols[ox..ox + Q]
                        .iter()
                        .all(|c| (c.0, c.1, c.3) == (xlo, xhi, pw))
                {
                    Q
                } else {
                    1
                };
                let first = x.add((((y0 + ylo * g.dh) * g.w + x0 + xlo * g.dw) as usize) * B);
                let nx = (xhi - xlo) as usize;
                let out = out_row.add(ox * B);
                let count = if g.include_pad != 0 {
                    ph * pw
                } else {
                    (ny * nx) as i64
                };
                if q == Q {
                    window::<Q>(g.avg != 0, first, (ny, nx), (rs, cs, step), out, count);
                } else {
                    window::<1>(g.avg != 0, first, (ny, nx), (rs, cs, step), out, count);
                }
                ox += q;
            }
        }
    }

    /// `N` adjacent pixels' windows (`step` floats apart), each `ny x nx`
    /// taps from `first`: the average over `count`, or the max (a NaN tap
    /// wins: `max(v, acc)` keeps `acc` where `v` is NaN, so the last NaN
    /// tap is kept beside it, off the max chain, and wins at the end).
    #[inline(always)]
    unsafe fn window<const N: usize>(
        avg: bool,
        first: *const f32,
        (ny, nx): (usize, usize),
        (rs, cs, step): (usize, usize, usize),
        out: *mut f32,
        count: i64,
    ) {
        if avg {
            let mut acc = [_mm256_setzero_ps(); N];
            for i in 0..ny {
                let row = first.add(i * rs);
                for j in 0..nx {
                    for (p, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_add_ps(*a, _mm256_loadu_ps(row.add(j * cs + p * step)));
                    }
                }
            }
            let n = _mm256_set1_ps(count as f32);
            for (p, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.add(p * B), _mm256_div_ps(*a, n));
            }
        } else {
            let mut acc = [_mm256_set1_ps(f32::NEG_INFINITY); N];
            let mut nan = [_mm256_setzero_ps(); N];
            let mut nans = [_mm256_setzero_ps(); N];
            for i in 0..ny {
                let row = first.add(i * rs);
                for j in 0..nx {
                    for p in 0..N {
                        let v = _mm256_loadu_ps(row.add(j * cs + p * step));
                        acc[p] = _mm256_max_ps(v, acc[p]);
                        let is_nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v);
                        nan[p] = _mm256_blendv_ps(nan[p], v, is_nan);
                        nans[p] = _mm256_or_ps(nans[p], is_nan);
                    }
                }
            }
            for p in 0..N {
                _mm256_storeu_ps(out.add(p * B), _mm256_blendv_ps(acc[p], nan[p], nans[p]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::test_data as data;

    /// The definition on plain indices: output `(oy, ox, l)` from the
    /// in-bounds taps of its window.
    fn definition(g: &PoolGeom, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; (g.oh * g.ow) as usize * B];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for l in 0..B {
                    let (mut m, mut s, mut inside, mut padded) =
                        (f32::NEG_INFINITY, 0f32, 0i64, 0i64);
                    for ky in 0..g.kh {
                        for kx in 0..g.kw {
                            let iy = oy * g.sh - g.pt + ky * g.dh;
                            let ix = ox * g.sw - g.pl + kx * g.dw;
                            if iy < g.h + g.pb && ix < g.w + g.pr {
                                padded += 1;
                            }
                            if (0..g.h).contains(&iy) && (0..g.w).contains(&ix) {
                                inside += 1;
                                let v = x[((iy * g.w + ix) as usize) * B + l];
                                s += v;
                                if v > m || v.is_nan() {
                                    m = v;
                                }
                            }
                        }
                    }
                    let n = if g.include_pad != 0 { padded } else { inside };
                    y[((oy * g.ow + ox) as usize) * B + l] =
                        if g.avg != 0 { s / n as f32 } else { m };
                }
            }
        }
        y
    }

    /// A max pool's geometry with a `k x k` window, stride `s` and
    /// dilation `d` along both axes, `pad` on every side.
    fn square(h: i64, w: i64, (k, s, d): (i64, i64, i64), pad: i64, ceil: bool) -> PoolGeom {
        PoolGeom {
            h,
            w,
            oh: out_size(h, k, s, d, pad, pad, ceil),
            ow: out_size(w, k, s, d, pad, pad, ceil),
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            dh: d,
            dw: d,
            pt: pad,
            pl: pad,
            pb: pad,
            pr: pad,
            avg: 0,
            include_pad: 0,
        }
    }

    fn out_size(n: i64, k: i64, s: i64, d: i64, p0: i64, p1: i64, ceil: bool) -> i64 {
        let span = n + p0 + p1 - (k - 1) * d - 1;
        let o = if ceil {
            (span + s - 1) / s + 1
        } else {
            span / s + 1
        };
        // A window may not start in the end padding.
        if ceil && (o - 1) * s >= n + p0 {
            o - 1
        } else {
            o
        }
    }

    /// GoogLeNet's and ResNet's max pools (3x3 stride 2 with ceil mode,
    /// 3x3 stride 1 pad 1), DenseNet's 2x2 average pool, an Inception
    /// 3x3 average pool with and without the padding counted, a dilated
    /// max pool: the definition, bitwise, on both paths (the separable
    /// max without NaN, the direct walk with one), a NaN kept, in bands
    /// of rows.
    #[test]
    fn pools_match_the_definition_on_every_path() {
        let cases = [
            // (h, w, k, s, d, pad, ceil, avg, include_pad)
            (14, 14, 3, 2, 1, 0, true, false, false),
            (13, 11, 3, 1, 1, 1, false, false, false),
            (8, 8, 2, 2, 1, 0, false, true, false),
            (9, 7, 3, 1, 1, 1, false, true, true),
            (9, 7, 3, 1, 1, 1, false, true, false),
            (12, 12, 3, 1, 2, 2, false, false, false),
            (5, 5, 3, 2, 1, 1, true, true, false),
            // The 16-lane kernels' column groups and their tails: widths
            // odd and even, one to five vectors past a group, few rows.
            (1, 1, 3, 1, 1, 1, false, false, false),
            (2, 3, 3, 1, 1, 1, false, false, false),
            (7, 7, 3, 1, 1, 1, false, false, false),
            (4, 17, 3, 1, 1, 1, false, false, false),
            (6, 20, 3, 1, 1, 1, false, false, false),
            (3, 3, 3, 2, 1, 0, true, false, false),
            (4, 4, 3, 2, 1, 0, true, false, false),
            (7, 7, 3, 2, 1, 0, true, false, false),
            (9, 21, 3, 2, 1, 0, true, false, false),
            (10, 36, 3, 2, 1, 0, true, false, false),
            (11, 19, 3, 2, 1, 0, false, false, false),
            (14, 14, 2, 2, 1, 0, true, false, false),
            (7, 7, 2, 2, 1, 0, true, false, false),
            (8, 10, 2, 2, 1, 0, false, false, false),
            (9, 19, 2, 2, 1, 0, true, false, false),
            // Windows of other widths through the 16-lane separable max.
            (9, 10, 2, 1, 1, 0, false, false, false),
            (11, 13, 4, 3, 1, 1, true, false, false),
        ];
        for (h, w, k, s, d, pad, ceil, avg, include) in cases {
            let g = PoolGeom {
                avg: avg as i64,
                include_pad: include as i64,
                ..square(h, w, (k, s, d), pad, ceil)
            };
            for with_nan in [false, true] {
                let mut x = data((h * w) as usize * B, (h * 7 + k) as u32);
                let pixels = x.len() / B;
                if with_nan {
                    x[(5 % pixels) * B + 3] = f32::NAN;
                }
                // Ties between +0 and -0: the first tap in the window wins.
                if pixels > 8 {
                    x[7 * B] = 0.0;
                    x[8 * B] = -0.0;
                }
                let want = definition(&g, &x);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                // Three copies of the plane, the last two as a second
                // task's share.
                let x3: Vec<f32> = x.iter().chain(&x).chain(&x).copied().collect();
                let mut got = vec![0f32; 3 * want.len()];
                for (a, b) in [(0, 1), (1, 3)] {
                    let rc = unsafe { dnnc_pool_nchw8c(&g, x3.as_ptr(), got.as_mut_ptr(), a, b) };
                    assert_eq!(rc, 0);
                }
                for plane in got.chunks(want.len()) {
                    assert_eq!(bits(plane), bits(&want), "{g:?}");
                }
                #[cfg(target_arch = "x86_64")]
                if crate::cpu::avx2_fma() {
                    let mut narrow = vec![0f32; want.len()];
                    let plane = std::iter::once((x.as_ptr(), narrow.as_mut_ptr()));
                    unsafe { x86::planes_on(&g, plane, false) };
                    assert_eq!(bits(&narrow), bits(&want), "8-lane {g:?}");
                }
                let mut port = vec![0f32; want.len()];
                unsafe { portable(&g, x.as_ptr(), port.as_mut_ptr(), 0, g.oh) };
                assert_eq!(bits(&port), bits(&want), "portable {g:?}");
                if with_nan && !avg && s == 1 && pad == 1 && d == 1 {
                    assert!(got.iter().any(|v| v.is_nan()), "the NaN tap wins: {g:?}");
                }
            }
        }
    }

    /// Ties between +0 and -0 across rows and columns: the first tap in
    /// (row, column) order wins on every path, as in the definition.
    #[test]
    fn signed_zero_ties_keep_the_first_tap() {
        let cases = [
            // (h, w, k, s, pad, ceil)
            (9, 13, 3, 1, 1, false),
            (11, 18, 3, 2, 0, true),
            (8, 9, 3, 3, 1, false),
            (10, 13, 2, 2, 0, true),
        ];
        for (h, w, k, s, pad, ceil) in cases {
            let g = square(h, w, (k, s, 1), pad, ceil);
            // Negative everywhere but a checkerboard of signed zeros.
            let mut x: Vec<f32> = data((h * w) as usize * B, 11)
                .iter()
                .map(|v| -v.abs() - 0.5)
                .collect();
            for r in 0..h {
                for c in 0..w {
                    for l in 0..B as i64 {
                        if (r * 3 + c * 5 + l) % 4 < 2 {
                            let z = if (r + c + l) % 2 == 0 { 0.0 } else { -0.0 };
                            x[((r * w + c) as usize) * B + l as usize] = z;
                        }
                    }
                }
            }
            let want = definition(&g, &x);
            let mut got = vec![0f32; want.len()];
            assert_eq!(
                unsafe { dnnc_pool_nchw8c(&g, x.as_ptr(), got.as_mut_ptr(), 0, 1) },
                0
            );
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{g:?}");
            #[cfg(target_arch = "x86_64")]
            if crate::cpu::avx2_fma() {
                let plane = std::iter::once((x.as_ptr(), got.as_mut_ptr()));
                unsafe { x86::planes_on(&g, plane, false) };
                assert_eq!(bits(&got), bits(&want), "8-lane {g:?}");
            }
            assert!(want.iter().any(|v| v.to_bits() == (-0f32).to_bits()));
            assert!(want.iter().any(|v| v.to_bits() == 0));
        }
    }

    /// A geometry with a zero size or a reversed plane range is refused.
    #[test]
    fn bad_geometries_are_refused() {
        let g = PoolGeom {
            h: 4,
            w: 4,
            oh: 2,
            ow: 2,
            kh: 2,
            kw: 2,
            sh: 2,
            sw: 2,
            dh: 1,
            dw: 1,
            ..PoolGeom::default()
        };
        let x = [0f32; 4 * 4 * B];
        let mut y = [0f32; 2 * 2 * B];
        assert_eq!(
            unsafe { dnnc_pool_nchw8c(&g, x.as_ptr(), y.as_mut_ptr(), 1, 0) },
            2
        );
        let zero = PoolGeom { kh: 0, ..g };
        assert_eq!(
            unsafe { dnnc_pool_nchw8c(&zero, x.as_ptr(), y.as_mut_ptr(), 0, 2) },
            2
        );
        assert_eq!(
            unsafe { dnnc_pool_nchw8c(&g, x.as_ptr(), y.as_mut_ptr(), 0, 1) },
            0
        );
    }
}
