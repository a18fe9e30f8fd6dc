//! Grouped convolutions with eight input and eight output channels per
//! group on NCHW data (RegNet's 3x3 convs: group width 8). A call unit
//! is one output row of one group of one image.
//!
//! A GEMM per group has eight rows, so the packed GEMM's second 6-row
//! panel runs a third full, Winograd's per-frequency GEMMs are 8 x 8 and
//! im2col writes nine copies of the input. Here a call copies, per run of
//! consecutive output rows of one plane (a segment, as many rows as keep
//! the copy within 128 KiB), the input rows they read of the
//! group's 8 channels once into a zero-padded scratch, at stride 2 split
//! into even and odd phase rows so that every tap reads consecutive
//! floats. Then, per 16 output columns (or the same 8 columns of two rows
//! where a row has at most 8), it keeps 4 output channels in 8 vector
//! accumulators: per input channel and tap two vector loads, four
//! broadcast weights and eight multiply-adds, twice for the group's 8
//! channels. The filter is packed at compile time as
//! `[group][c][ky][kx][o]` ([`pack_filter`]).
//!
//! Each output is `bias + sum over (c, ky, kx) in that order` (fused
//! multiply-adds on AVX2+FMA; a product then an add in the portable
//! path), then the residual, the clamp and the activation, as
//! [`Epilogue`] describes, so results do not depend on how units are
//! split over threads.

use super::pgemm::{activate, Epilogue};
use std::cell::RefCell;

/// Channels per group, in and out.
pub const GROUP: usize = 8;

/// Most floats of the scratch a call fills at once (128 KiB, within L2):
/// a plane's output rows are computed in segments whose input rows fit.
const SCRATCH_FLOATS: usize = 32 * 1024;

/// The geometry of a grouped-8 conv, as the generated code passes it
/// (a compile-time buffer of `usize`s in this order).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group8Geom {
    /// Input (and output) channels; a multiple of [`GROUP`].
    pub c: usize,
    /// Input rows.
    pub h: usize,
    /// Input columns.
    pub w: usize,
    /// Output rows.
    pub oh: usize,
    /// Output columns.
    pub ow: usize,
    /// Filter rows.
    pub kh: usize,
    /// Filter columns.
    pub kw: usize,
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Padding rows above.
    pub pt: usize,
    /// Padding columns on the left.
    pub pl: usize,
}

impl Group8Geom {
    /// Floats of one phase row in the scratch: the output row rounded up
    /// to whole vectors, plus the taps' reach past it.
    fn phase_len(&self) -> usize {
        self.ow.div_ceil(8) * 8 + (self.kw - 1) / self.sw + 1
    }

    /// Floats of the scratch of `rows` output rows of a plane:
    /// `[c][padded input row][phase][phase_len]`.
    fn scratch_len(&self, rows: usize) -> usize {
        GROUP * self.input_rows(rows) * self.sw * self.phase_len()
    }

    /// Input rows (padding rows included) that `rows` consecutive output
    /// rows read.
    fn input_rows(&self, rows: usize) -> usize {
        (rows - 1) * self.sh + self.kh
    }

    /// Output rows of one plane filled and computed together: as many as
    /// keep the scratch within [`SCRATCH_FLOATS`] (at least one).
    fn segment_rows(&self) -> usize {
        let per_row = GROUP * self.sh * self.sw * self.phase_len();
        let first = self.scratch_len(1);
        (1 + SCRATCH_FLOATS.saturating_sub(first) / per_row).min(self.oh)
    }

    /// Units of `n` images: `n * groups * oh`.
    pub fn units(&self, n: usize) -> usize {
        n * (self.c / GROUP) * self.oh
    }

    /// Why this geometry is not computed here, if it is not.
    pub fn unfit(&self) -> Option<&'static str> {
        if self.c == 0 || !self.c.is_multiple_of(GROUP) {
            Some("channels must be whole groups of 8")
        } else if self.sh == 0 || self.sw == 0 || self.kh == 0 || self.kw == 0 {
            Some("strides and filter extents must be positive")
        } else if self.oh == 0 || self.ow == 0 {
            Some("empty output")
        } else {
            None
        }
    }
}

/// Packs an OIHW filter `[c][8][kh][kw]` (grouped: 8 input channels per
/// output channel) as `[group][c][ky][kx][o]`: the 8 output channels'
/// weights of one input channel and tap side by side.
pub fn pack_filter(w: &[f32], c: usize, taps: usize) -> Vec<f32> {
    let mut out = vec![0f32; c * GROUP * taps];
    for oc in 0..c {
        let (grp, o) = (oc / GROUP, oc % GROUP);
        for ic in 0..GROUP {
            for t in 0..taps {
                out[((grp * GROUP + ic) * taps + t) * GROUP + o] = w[(oc * GROUP + ic) * taps + t];
            }
        }
    }
    out
}

/// A thread's buffers, kept between calls: the padded input rows of a
/// segment, one padded input row to split into phases (stride 2), and
/// the segment's tap offsets.
struct Scratch {
    rows: Vec<f32>,
    row: Vec<f32>,
    taps: Vec<usize>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            rows: Vec::new(),
            row: Vec::new(),
            taps: Vec::new(),
        })
    };
}

/// Computes units `u0..u1` (unit `(img * groups + grp) * oh + oy`: output
/// row `oy` of group `grp`'s 8 channels of image `img`) of the grouped-8
/// conv `geo` of filter `w` (packed by [`pack_filter`]) over `x` into
/// `y` (NCHW), with `ep`'s bias (per output channel), residual (at `y`'s
/// offsets), clamp and activation; `ep` may be null. Returns 0, or 1 for
/// a geometry it does not compute.
///
/// # Safety
/// `w`, `x`, `y`, `geo` (and `ep`'s pointers) must be valid for the
/// geometry and the images the units reach; units of one call must not
/// overlap another running call's.
#[no_mangle]
pub unsafe extern "C" fn dnnc_conv_group8(
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

/// [`dnnc_conv_group8`] on the AVX2 path or the portable one.
unsafe fn conv(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: *const Group8Geom,
    (u0, u1): (usize, usize),
    ep: *const Epilogue,
    avx2: bool,
) -> i32 {
    let geo = *geo;
    if geo.unfit().is_some() {
        return 1;
    }
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let Scratch {
            rows: s,
            row: padded,
            taps,
        } = &mut *scratch;
        let seg = geo.segment_rows();
        // Plus a vector of slack for the AVX2 fill's last zero store.
        if s.len() < geo.scratch_len(seg) + 8 {
            s.resize(geo.scratch_len(seg) + 8, 0.0);
        }
        if padded.len() < 2 * geo.phase_len() + 16 {
            padded.resize(2 * geo.phase_len() + 16, 0.0);
        }
        let groups = geo.c / GROUP;
        let len = geo.phase_len();
        let mut u = u0;
        while u < u1 {
            // A segment: consecutive output rows of one plane.
            let (plane, oy0) = (u / geo.oh, u % geo.oh);
            let oy1 = geo.oh.min(oy0 + (u1 - u)).min(oy0 + seg);
            let rows = geo.input_rows(oy1 - oy0);
            let grp = plane % groups;
            // The group's first input (and output) channel plane.
            let first = plane * GROUP;
            let top = (oy0 * geo.sh) as isize - geo.pt as isize;
            let xg = x.add(first * geo.h * geo.w);
            #[cfg(target_arch = "x86_64")]
            if avx2 && geo.sw <= 2 {
                fill_avx2(&geo, xg, (top, rows), s, padded);
            } else {
                fill(&geo, xg, (top, rows), s);
            }
            #[cfg(not(target_arch = "x86_64"))]
            fill(&geo, xg, (top, rows), s);
            // Scratch offset of each (input channel, tap) for the
            // segment's first output row, in filter order.
            taps.clear();
            for ic in 0..GROUP {
                for ky in 0..geo.kh {
                    for kx in 0..geo.kw {
                        taps.push(((ic * rows + ky) * geo.sw + kx % geo.sw) * len + kx / geo.sw);
                    }
                }
            }
            let wg = w.add(grp * GROUP * geo.kh * geo.kw * GROUP);
            let bias = if ep.bias.is_null() {
                ep.bias
            } else {
                ep.bias.add(grp * GROUP)
            };
            let mut oy = oy0;
            while oy < oy1 {
                // Rows of at most 8 columns go two at a time with AVX2.
                let rows = if avx2 && geo.ow <= 8 && oy + 1 < oy1 {
                    2
                } else {
                    1
                };
                let at = first * geo.oh * geo.ow + oy * geo.ow;
                let row = Row {
                    geo: &geo,
                    s: s.as_ptr().add((oy - oy0) * geo.sh * geo.sw * len),
                    rows,
                    taps,
                    w: wg,
                    y: y.add(at),
                    res: if ep.res.is_null() {
                        ep.res
                    } else {
                        ep.res.add(at)
                    },
                    bias,
                    ep: &ep,
                };
                oy += rows;
                #[cfg(target_arch = "x86_64")]
                if avx2 {
                    avx2_row(&row);
                    continue;
                }
                portable_row(&row);
            }
            u += oy1 - oy0;
        }
    });
    0
}

/// Copies input rows `top .. top + rows` (negative or past the input:
/// padding) of the group's 8 channel planes from `x` into `s` as
/// `[c][row][phase][phase_len]`: phase `p` of a padded row holds padded
/// columns `p, p + sw, ...` (input column `j - pl` of padded column `j`,
/// zero outside the input).
unsafe fn fill(geo: &Group8Geom, x: *const f32, (top, rows): (isize, usize), s: &mut [f32]) {
    let len = geo.phase_len();
    // Padded column `j * sw + p` is input column `j * sw + p - pl`:
    // inside the row for `j` in `[j0, j1)` of phase `p` (divisions
    // hoisted here: per row they cost more than the copying).
    let spans: Vec<(usize, usize)> = (0..geo.sw)
        .map(|p| {
            let j0 = geo.pl.saturating_sub(p).div_ceil(geo.sw).min(len);
            let j1 = (geo.w + geo.pl)
                .saturating_sub(p)
                .div_ceil(geo.sw)
                .clamp(j0, len);
            (j0, j1)
        })
        .collect();
    for ic in 0..GROUP {
        let plane = x.add(ic * geo.h * geo.w);
        for r in 0..rows {
            let iy = top + r as isize;
            let src = (iy >= 0 && (iy as usize) < geo.h).then(|| plane.add(iy as usize * geo.w));
            for (p, &(j0, j1)) in spans.iter().enumerate() {
                let dst = &mut s[((ic * rows + r) * geo.sw + p) * len..][..len];
                let Some(row) = src else {
                    dst.fill(0.0);
                    continue;
                };
                dst[..j0].fill(0.0);
                dst[j1..].fill(0.0);
                if j1 > j0 {
                    let from = row.add(j0 * geo.sw + p - geo.pl);
                    for (k, d) in dst[j0..j1].iter_mut().enumerate() {
                        *d = std::ptr::read_volatile(from.add(k * geo.sw));
                    }
                }
            }
        }
    }
}

/// [`fill`] for strides 1 and 2 with AVX2: each padded row zeroed a
/// vector at a time, its input part copied (whole vectors, then lane by
/// lane, so no read passes the input row); at stride 2 into `padded`
/// first, then split into its even and odd phase rows by shuffles.
/// Through slices, `fill`'s bounds checks and short `memset`/`memcpy`
/// calls took a quarter of a 14x14 layer's time, and at stride 2 its
/// lane-by-lane split more than the multiply-adds.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fill_avx2(
    geo: &Group8Geom,
    x: *const f32,
    (top, rows): (isize, usize),
    s: &mut [f32],
    padded: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (len, sw) = (geo.phase_len(), geo.sw);
    debug_assert!(sw == 1 || sw == 2);
    // Padded columns the phase rows hold, and the input's part of them.
    let cols = len * sw;
    assert!(s.len() >= GROUP * rows * cols + 8, "scratch too small");
    assert!(padded.len() >= cols + 16, "row buffer too small");
    let j0 = geo.pl.min(cols);
    let j1 = (geo.w + geo.pl).clamp(j0, cols);
    let zero = _mm256_setzero_ps();
    let base = s.as_mut_ptr();
    let tmp = padded.as_mut_ptr();
    for ic in 0..GROUP {
        let plane = x.add(ic * geo.h * geo.w);
        for r in 0..rows {
            let row = base.add((ic * rows + r) * cols);
            // Stride 1 builds the padded row in place.
            let dst = if sw == 1 { row } else { tmp };
            // Zeros over the row (the last vector may spill into the
            // next row, written after it, or the slack).
            let mut k = 0;
            while k < cols {
                _mm256_storeu_ps(dst.add(k), zero);
                k += 8;
            }
            let iy = top + r as isize;
            if iy >= 0 && (iy as usize) < geo.h && j1 > j0 {
                let from = plane.add(iy as usize * geo.w + j0 - geo.pl);
                let (to, n) = (dst.add(j0), j1 - j0);
                let mut k = 0;
                while k + 8 <= n {
                    _mm256_storeu_ps(to.add(k), _mm256_loadu_ps(from.add(k)));
                    k += 8;
                }
                while k < n {
                    std::ptr::write_volatile(to.add(k), *from.add(k));
                    k += 1;
                }
            }
            if sw == 2 {
                // Padded column 2j to phase 0's j, 2j + 1 to phase 1's.
                // The even row first: its last vector spills into the
                // odd row, written after it; the odd row's into the next
                // row, written later, or the slack.
                for (phase, pick) in [(0, false), (1, true)] {
                    let out = row.add(phase * len);
                    let mut j = 0;
                    while j < len {
                        let a = _mm256_loadu_ps(tmp.add(2 * j));
                        let b = _mm256_loadu_ps(tmp.add(2 * j + 8));
                        let v = if pick {
                            _mm256_shuffle_ps::<0b11_01_11_01>(a, b)
                        } else {
                            _mm256_shuffle_ps::<0b10_00_10_00>(a, b)
                        };
                        let v = _mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v));
                        _mm256_storeu_ps(out.add(j), _mm256_castpd_ps(v));
                        j += 8;
                    }
                }
            }
        }
    }
}

/// One unit's operands.
struct Row<'a> {
    geo: &'a Group8Geom,
    /// The filled scratch at this row.
    s: *const f32,
    /// Output rows from this one (2 only on the AVX2 path, for rows of
    /// at most 8 columns).
    rows: usize,
    /// Scratch offset of each (input channel, tap) at output column 0, in
    /// the packed filter's order.
    taps: &'a [usize],
    /// The group's packed filter.
    w: *const f32,
    /// Output channel 0's row; channel `o` is `oh * ow` floats further.
    y: *mut f32,
    /// The residual at `y`'s offsets, or null.
    res: *const f32,
    /// The group's 8 biases, or null.
    bias: *const f32,
    ep: &'a Epilogue,
}

impl Row<'_> {
    /// Output channel `o`'s value at column `ox` after the epilogue.
    unsafe fn finish(&self, o: usize, ox: usize, mut v: f32) -> f32 {
        let plane = o * self.geo.oh * self.geo.ow;
        if !self.res.is_null() {
            v += *self.res.add(plane + ox);
        }
        activate(self.ep.act, v.max(self.ep.lo).min(self.ep.hi))
    }
}

/// A unit one lane at a time, for machines without AVX2 (the AVX2 row's
/// order of operations, with a rounded product before each add).
unsafe fn portable_row(r: &Row) {
    let g = r.geo;
    for ox in 0..g.ow {
        for o in 0..GROUP {
            let mut acc = if r.bias.is_null() {
                0.0
            } else {
                *r.bias.add(o)
            };
            for (t, &off) in r.taps.iter().enumerate() {
                acc += *r.w.add(t * GROUP + o) * *r.s.add(off + ox);
            }
            *r.y.add(o * g.oh * g.ow + ox) = r.finish(o, ox, acc);
        }
    }
}

/// An output row of the group's 8 channels: 16 columns (two vectors) of
/// 4 channels at a time in 8 ymm accumulators, so each broadcast weight
/// serves two multiply-adds (one weight per multiply-add measured 43% of
/// the core's peak on a 208-channel 14x14 layer).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_row(r: &Row) {
    let g = r.geo;
    if r.rows == 2 {
        // The same columns of the next output row as the second vector.
        let next = g.sh * g.sw * g.phase_len();
        avx2_block::<2>(r, 0, 0, (next, g.ow), (g.ow, g.ow));
        avx2_block::<2>(r, 0, 4, (next, g.ow), (g.ow, g.ow));
        return;
    }
    let ow = g.ow;
    let mut ox = 0;
    while ox < ow {
        let n0 = (ow - ox).min(8);
        if ow - ox > 8 {
            let n1 = (ow - ox - 8).min(8);
            avx2_block::<2>(r, ox, 0, (8, 8), (n0, n1));
            avx2_block::<2>(r, ox, 4, (8, 8), (n0, n1));
            ox += 16;
        } else {
            avx2_block::<1>(r, ox, 0, (8, 8), (n0, 0));
            avx2_block::<1>(r, ox, 4, (8, 8), (n0, 0));
            ox += 8;
        }
    }
}

/// Output channels `o0..o0 + 4` at `NC` vectors of output: the first
/// at column `ox`, the second `d.0` floats further in the scratch and
/// `d.1` in the output (the next 8 columns, or the same ones of the next
/// row); `n` lanes of each are stored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn avx2_block<const NC: usize>(
    r: &Row,
    ox: usize,
    o0: usize,
    (ds, dy): (usize, usize),
    (n0, n1): (usize, usize),
) {
    use super::pgemm::x86::sigmoid8;
    use super::pgemm::{ACT_SIGMOID, ACT_SILU};
    use std::arch::x86_64::*;
    let g = r.geo;
    let plane = g.oh * g.ow;
    let bias = |o: usize| {
        if r.bias.is_null() {
            _mm256_setzero_ps()
        } else {
            _mm256_set1_ps(*r.bias.add(o0 + o))
        }
    };
    // Literal indices throughout (see `blocked::avx2_tile_n`): the
    // accumulators stay in registers.
    let (mut a0, mut a1, mut a2, mut a3) = (bias(0), bias(1), bias(2), bias(3));
    let (mut b0, mut b1, mut b2, mut b3) = (a0, a1, a2, a3);
    let mut wp = r.w.add(o0);
    let sx = r.s.add(ox);
    for &off in r.taps {
        let xv = _mm256_loadu_ps(sx.add(off));
        let w0 = _mm256_broadcast_ss(&*wp);
        let w1 = _mm256_broadcast_ss(&*wp.add(1));
        let w2 = _mm256_broadcast_ss(&*wp.add(2));
        let w3 = _mm256_broadcast_ss(&*wp.add(3));
        a0 = _mm256_fmadd_ps(w0, xv, a0);
        a1 = _mm256_fmadd_ps(w1, xv, a1);
        a2 = _mm256_fmadd_ps(w2, xv, a2);
        a3 = _mm256_fmadd_ps(w3, xv, a3);
        if NC > 1 {
            let xv = _mm256_loadu_ps(sx.add(off + ds));
            b0 = _mm256_fmadd_ps(w0, xv, b0);
            b1 = _mm256_fmadd_ps(w1, xv, b1);
            b2 = _mm256_fmadd_ps(w2, xv, b2);
            b3 = _mm256_fmadd_ps(w3, xv, b3);
        }
        wp = wp.add(GROUP);
    }
    let (lo, hi) = (_mm256_set1_ps(r.ep.lo), _mm256_set1_ps(r.ep.hi));
    let store = |o: usize, c: usize, v: __m256| {
        let n = if c == 0 { n0 } else { n1 };
        let at = (o0 + o) * plane + ox + c * dy;
        let mut v = v;
        if !r.res.is_null() {
            v = _mm256_add_ps(v, load_part(r.res.add(at), n));
        }
        v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
        v = match r.ep.act {
            ACT_SIGMOID => sigmoid8(v),
            ACT_SILU => _mm256_mul_ps(v, sigmoid8(v)),
            _ => v,
        };
        if n == 8 {
            _mm256_storeu_ps(r.y.add(at), v);
        } else {
            store_part(r.y.add(at), v, n);
        }
    };
    for (o, v) in [a0, a1, a2, a3].into_iter().enumerate() {
        store(o, 0, v);
    }
    if NC > 1 {
        for (o, v) in [b0, b1, b2, b3].into_iter().enumerate() {
            store(o, 1, v);
        }
    }
}

/// The first `n` (at most 8) floats at `p`, zeros after. Lane by lane:
/// AVX2's masked loads and stores are microcoded on Zen 1 (a 14-column
/// layer whose every row ends in a partial vector ran 13% slower with
/// them).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn load_part(p: *const f32, n: usize) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    if n == 8 {
        return _mm256_loadu_ps(p);
    }
    let mut lanes = [0f32; 8];
    for (i, l) in lanes.iter_mut().enumerate().take(n) {
        *l = std::ptr::read_volatile(p.add(i));
    }
    _mm256_loadu_ps(lanes.as_ptr())
}

/// The first `n` (below 8) lanes of `v` to `p` (see [`load_part`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_part(p: *mut f32, v: std::arch::x86_64::__m256, n: usize) {
    let mut lanes = [0f32; 8];
    std::arch::x86_64::_mm256_storeu_ps(lanes.as_mut_ptr(), v);
    for (i, &l) in lanes.iter().enumerate().take(n) {
        std::ptr::write_volatile(p.add(i), l);
    }
}

#[cfg(test)]
mod tests {
    use super::super::pgemm::ACT_NONE;
    use super::*;

    /// The plain definition in f64: bias + sum over the group's 8 input
    /// channels and taps, residual, clamp, then the activation.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        geo: &Group8Geom,
        n: usize,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        res: Option<&[f32]>,
        (lo, hi): (f32, f32),
        act: u32,
    ) -> Vec<f32> {
        let g = geo;
        let mut y = vec![0f32; n * g.c * g.oh * g.ow];
        for img in 0..n {
            for oc in 0..g.c {
                let grp = oc / GROUP;
                for oy in 0..g.oh {
                    for ox in 0..g.ow {
                        let mut acc = bias[oc] as f64;
                        for ic in 0..GROUP {
                            let cin = grp * GROUP + ic;
                            for ky in 0..g.kh {
                                for kx in 0..g.kw {
                                    let iy = (oy * g.sh + ky) as isize - g.pt as isize;
                                    let ix = (ox * g.sw + kx) as isize - g.pl as isize;
                                    if iy < 0 || ix < 0 || iy as usize >= g.h || ix as usize >= g.w
                                    {
                                        continue;
                                    }
                                    let xv = x[((img * g.c + cin) * g.h + iy as usize) * g.w
                                        + ix as usize];
                                    let wv = w[((oc * GROUP + ic) * g.kh + ky) * g.kw + kx];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        let i = ((img * g.c + oc) * g.oh + oy) * g.ow + ox;
                        if let Some(r) = res {
                            acc += r[i] as f64;
                        }
                        y[i] = activate(act, (acc as f32).max(lo).min(hi));
                    }
                }
            }
        }
        y
    }

    fn check(geo: Group8Geom, n: usize, with_res: bool, act: u32, splits: &[usize]) {
        let g = &geo;
        let x: Vec<f32> = (0..n * g.c * g.h * g.w)
            .map(|i| ((i * 7919) % 101) as f32 * 0.02 - 1.0)
            .collect();
        let w: Vec<f32> = (0..g.c * GROUP * g.kh * g.kw)
            .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
            .collect();
        let bias: Vec<f32> = (0..g.c).map(|i| i as f32 * 0.05 - 0.3).collect();
        let res: Vec<f32> = (0..n * g.c * g.oh * g.ow)
            .map(|i| (i % 13) as f32 * 0.1 - 0.6)
            .collect();
        let packed = pack_filter(&w, g.c, g.kh * g.kw);
        let ep = Epilogue {
            bias: bias.as_ptr(),
            res: if with_res {
                res.as_ptr()
            } else {
                std::ptr::null()
            },
            lo: -1.5,
            hi: 2.5,
            act,
            ..Epilogue::NONE
        };
        let mut ys = Vec::new();
        let mut bounds = vec![0];
        bounds.extend_from_slice(splits);
        bounds.push(geo.units(n));
        let avx2 = crate::cpu::avx2_fma();
        // The portable path, and the AVX2 one where the machine has it.
        let mut runs = vec![false];
        if avx2 {
            runs.push(true);
        }
        for path in runs {
            let mut y = vec![f32::NAN; n * g.c * g.oh * g.ow];
            for b in bounds.windows(2) {
                let rc = unsafe {
                    conv(
                        packed.as_ptr(),
                        x.as_ptr(),
                        y.as_mut_ptr(),
                        &geo,
                        (b[0], b[1]),
                        &ep,
                        path,
                    )
                };
                assert_eq!(rc, 0);
            }
            ys.push((path, y));
        }
        let want = reference(
            &geo,
            n,
            &x,
            &w,
            &bias,
            with_res.then_some(&res[..]),
            (-1.5, 2.5),
            act,
        );
        for (avx2, y) in &ys {
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                    "{geo:?} avx2 {avx2} element {i}: {a} vs {b}"
                );
            }
        }
    }

    fn geo(c: usize, h: usize, w: usize, k: usize, s: usize, p: usize) -> Group8Geom {
        Group8Geom {
            c,
            h,
            w,
            oh: (h + 2 * p - k) / s + 1,
            ow: (w + 2 * p - k) / s + 1,
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            pt: p,
            pl: p,
        }
    }

    #[test]
    fn matches_the_definition() {
        use super::super::pgemm::{ACT_SIGMOID, ACT_SILU};
        // 3x3 stride 1 and 2 with padding, widths with and without a
        // partial last vector, units split mid-plane and mid-image.
        check(geo(16, 14, 14, 3, 1, 1), 2, true, ACT_NONE, &[5, 14, 30]);
        check(geo(24, 9, 20, 3, 2, 1), 1, false, ACT_NONE, &[7]);
        check(geo(8, 7, 7, 3, 1, 1), 3, false, ACT_SILU, &[]);
        check(geo(16, 12, 11, 1, 1, 0), 1, true, ACT_SIGMOID, &[1, 2]);
        check(geo(8, 10, 17, 5, 2, 2), 1, false, ACT_NONE, &[]);
        // Rows of at most 8 columns, paired on the AVX2 path, at stride
        // 2, the units split so that pairs and single rows mix.
        check(
            geo(16, 13, 13, 3, 2, 1),
            2,
            true,
            ACT_NONE,
            &[3, 10, 11, 20],
        );
    }

    #[test]
    fn pack_filter_puts_output_channels_side_by_side() {
        // c = 16: two groups; taps = 1.
        let w: Vec<f32> = (0..16 * 8).map(|i| i as f32).collect();
        let p = pack_filter(&w, 16, 1);
        // Group 1, input channel 3, output channel 5 = oc 13, ic 3.
        assert_eq!(p[(8 + 3) * 8 + 5], w[13 * 8 + 3]);
    }

    #[test]
    fn rejects_a_geometry_it_does_not_compute() {
        let mut g = geo(12, 4, 4, 3, 1, 1);
        let rc = unsafe {
            dnnc_conv_group8(
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null_mut(),
                &g,
                0,
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 1);
        g.c = 16;
        assert!(g.unfit().is_none());
    }
}
