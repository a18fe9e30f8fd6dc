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
        let cols: Vec<_> = (0..g.ow)
            .map(|ox| taps(ox, (g.sw, g.dw, g.kw), (g.pl, g.pr, g.w)))
            .collect();
        let wins: Vec<_> = (0..g.oh)
            .map(|oy| taps(oy, (g.sh, g.dh, g.kh), (g.pt, g.pb, g.h)))
            .collect();
        let mut hmax = Vec::new();
        for (x, y) in planes {
            if g.avg == 0 && separable_max(g, (&wins, &cols), &mut hmax, x, y) {
                continue;
            }
            rows(g, (&wins, &cols), x, y);
        }
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
        // The input rows the output rows read: `[iy0, iy1)`.
        let (ylo0, _, y00, _) = wins[r0 as usize];
        let (_, yhi1, y01, _) = wins[(r1 - 1) as usize];
        let iy0 = y00 + ylo0 * g.dh;
        let iy1 = (y01 + (yhi1 - 1) * g.dh + 1).max(iy0);
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
        // The columns whose whole window lies inside the row, `[f0, f1)`
        // (contiguous): with three taps they run as one pointer walk.
        let full = |c: &Taps| c.0 == 0 && c.1 == g.kw;
        let f0 = cols.iter().position(full).unwrap_or(cols.len());
        let f1 = f0 + cols[f0..].iter().take_while(|c| full(c)).count();
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
        ];
        for (h, w, k, s, d, pad, ceil, avg, include) in cases {
            let oh = out_size(h, k, s, d, pad, pad, ceil);
            let ow = out_size(w, k, s, d, pad, pad, ceil);
            let g = PoolGeom {
                h,
                w,
                oh,
                ow,
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
                avg: avg as i64,
                include_pad: include as i64,
            };
            for with_nan in [false, true] {
                let mut x = data((h * w) as usize * B, (h * 7 + k) as u32);
                if with_nan {
                    x[5 * B + 3] = f32::NAN;
                }
                // Ties between +0 and -0: the first tap in the window wins.
                x[7 * B] = 0.0;
                x[8 * B] = -0.0;
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
                let mut port = vec![0f32; want.len()];
                unsafe { portable(&g, x.as_ptr(), port.as_mut_ptr(), 0, oh) };
                assert_eq!(bits(&port), bits(&want), "portable {g:?}");
                if with_nan && !avg && s == 1 && pad == 1 && d == 1 {
                    assert!(got.iter().any(|v| v.is_nan()), "the NaN tap wins: {g:?}");
                }
            }
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
