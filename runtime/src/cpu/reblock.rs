//! One 8-channel block moved between the channel-blocked layout (a row of
//! `w` pixels is `[w][8]`, eight channels a pixel) and eight plain planes
//! (a row of `w` floats per channel), for kernels that compute on planes
//! inside a blocked region: the Winograd convolutions of
//! `data=nchw8c`, whose transforms work a channel at a time.
//! [`dnnc_unblock_rows`] spreads a block's input rows over its eight
//! zero-padded planes; [`dnnc_block_rows`] gathers eight channels' output
//! planes back into blocked rows with the conv's bias, residual and clamp.
//!
//! With AVX2 eight pixels of eight channels go as one 8x8 transpose in
//! ymm registers; elsewhere the same copies run element by element. Both
//! give bitwise the same results: each output is `(z + bias) + res`, then
//! `max(lo, ·)` and `min(hi, ·)` in that order (a NaN kept), whichever
//! path computes it.

/// Channels per block.
const B: usize = 8;

/// Copies `rows` rows of `w` pixels of one channel block into eight
/// planes: pixel `x` of row `j` is the 8 floats at `src + (j * srs + x) *
/// 8` (`srs` pixels from one row to the next), and channel `l`'s value of
/// it goes to `dst + l * dps + j * drs + x`. Returns 0, or 2 for a
/// negative size.
///
/// # Safety
/// `src` must hold the `rows` rows of `w` pixels, `dst` the eight planes'
/// `rows` rows of `w` floats; they must not overlap.
#[no_mangle]
pub unsafe extern "C" fn dnnc_unblock_rows(
    src: *const f32,
    srs: i64,
    rows: i64,
    w: i64,
    dst: *mut f32,
    dps: i64,
    drs: i64,
) -> i32 {
    let Some([srs, rows, w, dps, drs]) = sizes([srs, rows, w, dps, drs]) else {
        return 2;
    };
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        done = w / B * B;
        for j in 0..rows {
            x86::unblock_row(src.add(j * srs * B), dst.add(j * drs), dps, done);
        }
    }
    for j in 0..rows {
        for x in done..w {
            let p = src.add((j * srs + x) * B);
            for l in 0..B {
                *dst.add(l * dps + j * drs + x) = *p.add(l);
            }
        }
    }
    0
}

/// Writes `rows` blocked rows of `w` pixels of one channel block from
/// eight planes: channel `l`'s row `j` at `z + l * zps + j * zrs`; pixel
/// `x` of row `j` at `y + (j * yrs + x) * 8`, its channel `l` set to
/// `min(hi, max(lo, (z + b[l]) + r))`, `b` the 8 floats at `bias` (no add
/// when null) and `r` the float at the same offset from `res` as from `y`
/// (none when null). `max(lo, v)` and `min(hi, v)` keep a NaN `v`.
/// Returns 0, or 2 for a negative size.
///
/// # Safety
/// `z` must hold the eight planes' rows, `y` (and `res`, unless null) the
/// `rows` blocked rows, `bias` (unless null) 8 floats; `y` must not
/// overlap `z` or `bias` (it may be `res`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_block_rows(
    z: *const f32,
    zps: i64,
    zrs: i64,
    rows: i64,
    w: i64,
    y: *mut f32,
    yrs: i64,
    bias: *const f32,
    res: *const f32,
    lo: f32,
    hi: f32,
) -> i32 {
    let Some([zps, zrs, rows, w, yrs]) = sizes([zps, zrs, rows, w, yrs]) else {
        return 2;
    };
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::avx2_fma() {
        done = w / B * B;
        for j in 0..rows {
            let yo = j * yrs * B;
            let r = if res.is_null() { res } else { res.add(yo) };
            x86::block_row(z.add(j * zrs), zps, done, (y.add(yo), r), bias, (lo, hi));
        }
    }
    for j in 0..rows {
        for x in done..w {
            for l in 0..B {
                let o = (j * yrs + x) * B + l;
                let mut v = *z.add(l * zps + j * zrs + x);
                if !bias.is_null() {
                    v += *bias.add(l);
                }
                if !res.is_null() {
                    v += *res.add(o);
                }
                *y.add(o) = clamp(v, lo, hi);
            }
        }
    }
    0
}

/// The sizes and strides of a call as `usize`, or `None` if any is
/// negative.
fn sizes<const N: usize>(v: [i64; N]) -> Option<[usize; N]> {
    let mut out = [0; N];
    for (o, x) in out.iter_mut().zip(v) {
        *o = usize::try_from(x).ok()?;
    }
    Some(out)
}

/// `min(hi, max(lo, v))` as the vector instructions compute it: each
/// returns its second operand unless the first is greater (smaller), so a
/// NaN `v` comes through.
fn clamp(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if lo > v { lo } else { v };
    if hi < v {
        hi
    } else {
        v
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::B;
    use std::arch::x86_64::*;

    /// Transposes eight vectors (the depthwise scratch's 8x8 transpose):
    /// lane `i` of result `j` is lane `j` of input `i`.
    #[inline(always)]
    unsafe fn transpose8(mut r: [__m256; 8]) -> [__m256; 8] {
        super::super::dw8::x86::transpose8(&mut r);
        r
    }

    /// Pixels `[0, w)` (`w` a multiple of 8) of one blocked row at `src`
    /// into eight plane rows `dps` floats apart from `dst`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn unblock_row(src: *const f32, dst: *mut f32, dps: usize, w: usize) {
        for x in (0..w).step_by(B) {
            let p: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add((x + i) * B)));
            for (l, v) in transpose8(p).into_iter().enumerate() {
                _mm256_storeu_ps(dst.add(l * dps + x), v);
            }
        }
    }

    /// Pixels `[0, w)` (`w` a multiple of 8) of one blocked row `y` from
    /// eight plane rows `zps` floats apart from `z`, with the bias, the
    /// residual row `res` and the clamp of [`super::dnnc_block_rows`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn block_row(
        z: *const f32,
        zps: usize,
        w: usize,
        (y, res): (*mut f32, *const f32),
        bias: *const f32,
        (lo, hi): (f32, f32),
    ) {
        let (vlo, vhi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        let vb = (!bias.is_null()).then(|| _mm256_loadu_ps(bias));
        for x in (0..w).step_by(B) {
            let c: [__m256; 8] = std::array::from_fn(|l| _mm256_loadu_ps(z.add(l * zps + x)));
            for (i, mut v) in transpose8(c).into_iter().enumerate() {
                let o = (x + i) * B;
                if let Some(b) = vb {
                    v = _mm256_add_ps(v, b);
                }
                if !res.is_null() {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(res.add(o)));
                }
                _mm256_storeu_ps(y.add(o), _mm256_min_ps(vhi, _mm256_max_ps(vlo, v)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::test_data as data;

    /// Every pixel count around the vector width, with row strides past
    /// the rows: each value lands where the definition puts it, and
    /// nothing outside the rows is written.
    #[test]
    fn unblock_puts_each_channel_in_its_plane() {
        for w in [1, 7, 8, 9, 16, 23] {
            let (rows, srs, drs) = (3, w + 2, w + 5);
            let dps = rows * drs + 3;
            let src = data(rows * srs * B, w as u32);
            let mut dst = vec![f32::MAX; B * dps];
            let rc = unsafe {
                dnnc_unblock_rows(
                    src.as_ptr(),
                    srs as i64,
                    rows as i64,
                    w as i64,
                    dst.as_mut_ptr(),
                    dps as i64,
                    drs as i64,
                )
            };
            assert_eq!(rc, 0);
            let mut want = vec![f32::MAX; B * dps];
            for j in 0..rows {
                for x in 0..w {
                    for l in 0..B {
                        want[l * dps + j * drs + x] = src[(j * srs + x) * B + l];
                    }
                }
            }
            assert_eq!(dst, want, "w = {w}");
        }
    }

    /// The blocked rows are `clamp((z + b) + r)` channel by channel, bit
    /// for bit, with and without bias and residual, a NaN kept, and
    /// nothing past the rows written.
    #[test]
    fn block_rows_apply_bias_residual_and_clamp_per_channel() {
        for w in [1, 5, 8, 13, 16, 17] {
            for (with_bias, with_res) in
                [(false, false), (true, false), (true, true), (false, true)]
            {
                let (rows, zrs, yrs) = (2, w + 3, w + 1);
                let zps = rows * zrs + 1;
                let mut z = data(B * zps, 7 + w as u32);
                z[3] = f32::NAN;
                let bias = data(B, 99);
                let res = data(rows * yrs * B, 5);
                let (lo, hi) = (-0.25f32, 0.5f32);
                let mut y = vec![f32::MAX; rows * yrs * B];
                let rc = unsafe {
                    dnnc_block_rows(
                        z.as_ptr(),
                        zps as i64,
                        zrs as i64,
                        rows as i64,
                        w as i64,
                        y.as_mut_ptr(),
                        yrs as i64,
                        if with_bias {
                            bias.as_ptr()
                        } else {
                            std::ptr::null()
                        },
                        if with_res {
                            res.as_ptr()
                        } else {
                            std::ptr::null()
                        },
                        lo,
                        hi,
                    )
                };
                assert_eq!(rc, 0);
                let mut want = vec![f32::MAX; rows * yrs * B];
                for j in 0..rows {
                    for x in 0..w {
                        for l in 0..B {
                            let o = (j * yrs + x) * B + l;
                            let mut v = z[l * zps + j * zrs + x];
                            if with_bias {
                                v += bias[l];
                            }
                            if with_res {
                                v += res[o];
                            }
                            want[o] = if v.is_nan() { v } else { v.max(lo).min(hi) };
                        }
                    }
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(&y),
                    bits(&want),
                    "w = {w}, bias {with_bias}, res {with_res}"
                );
                if w > 3 {
                    assert!(y[3 * B].is_nan(), "the NaN of channel 0, pixel 3 is kept");
                }
            }
        }
    }

    /// Negative sizes are refused, not read.
    #[test]
    fn negative_sizes_are_refused() {
        let mut y = [0f32; 8];
        let rc = unsafe { dnnc_unblock_rows(y.as_ptr(), 1, -1, 1, y.as_mut_ptr(), 1, 1) };
        assert_eq!(rc, 2);
        let rc = unsafe {
            dnnc_block_rows(
                y.as_ptr(),
                1,
                1,
                1,
                -8,
                y.as_mut_ptr(),
                1,
                std::ptr::null(),
                std::ptr::null(),
                0.0,
                1.0,
            )
        };
        assert_eq!(rc, 2);
    }
}
