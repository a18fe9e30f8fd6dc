//! One output row of one channel block of a depthwise conv on
//! channel-blocked activations (`data=nchw8c`): the kernel the generated
//! code of a blocked depthwise conv calls per row (and per row of a fused
//! inverted-residual block, whose tap rows come from its expansion ring).
//! A pixel's eight channels are one ymm register, so each tap of a pixel
//! is one load and one FMA; the generated code, limited to Cranelift's
//! 128-bit vectors, spent two of each.
//!
//! Each output is `bias + sum over taps (row by row, column by column) +
//! residual`, then clamped, then activated (sigmoid or SiLU, bitwise the
//! GEMM epilogue's): the same on every path (AVX2 and portable), for
//! every pixel group size. Padding rows are read from a row of zeros
//! the caller passes; padding columns are skipped.

/// The geometry of a depthwise row, as the generated code passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DwRowGeom {
    /// Input row width (pixels).
    pub w: usize,
    /// Output row width (pixels).
    pub ow: usize,
    /// Filter rows: entries of the row pointer array.
    pub kh: usize,
    /// Filter columns.
    pub kw: usize,
    /// Column stride.
    pub sx: usize,
    /// Left padding (columns).
    pub pl: usize,
    /// Floats from one channel block's tap row to the next block's.
    pub x_block: usize,
    /// Floats from one channel block's output row to the next block's
    /// (the residual's too).
    pub y_block: usize,
    /// The row of zeros padding rows read (the same for every block).
    pub zero: *const f32,
    /// Clamp bounds (the infinities for none).
    pub lo: f32,
    /// Upper clamp bound.
    pub hi: f32,
    /// Input rows: read by [`dnnc_dw_nchw8c`], which finds each unit's
    /// tap rows itself (a row call is handed them).
    pub h: usize,
    /// Output rows ([`dnnc_dw_nchw8c`]).
    pub oh: usize,
    /// Row stride ([`dnnc_dw_nchw8c`]).
    pub sy: usize,
    /// Top padding (rows, [`dnnc_dw_nchw8c`]).
    pub pt: usize,
    /// Channel blocks per image ([`dnnc_dw_nchw8c`]).
    pub blocks: usize,
    /// Activation after the clamp ([`pgemm::ACT_NONE`],
    /// [`pgemm::ACT_SIGMOID`] or [`pgemm::ACT_SILU`]), applied while the
    /// pixel is in registers: as a generic epilogue it re-read every row.
    pub act: u32,
}

/// Most filter rows a call takes (the largest depthwise windows of the
/// model zoo are 7x7; the bound only keeps a corrupted descriptor from
/// reading past the row array).
pub const DW_ROW_MAX_KH: usize = 32;

/// Channels per block.
const B: usize = 8;

use super::pgemm;

/// Computes one output row of channel blocks `b0..b1`. Block `b`'s
/// output row (`[ow][8]`) is `y + b * y_block`, its tap row `ky` (`[w][8]`)
/// `rows[ky] + b * x_block`, or the descriptor's row of zeros where
/// `rows[ky]` is that row (a tap row in the padding), its taps `w + b *
/// kh * kw * 8` (`[kh * kw][8]`) and biases `bias + b * 8` (or none for a
/// null `bias`). Each output is the bias plus the taps, plus `res` (the
/// output's layout, or null), clamped to the descriptor's bounds. Returns
/// 0, or 1 for a descriptor it does not compute (see [`dw_row_fits`]).
///
/// # Safety
/// The pointers must address buffers of those shapes; `y` must not
/// overlap the rows or `w` (it may be `res`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_dw_row_nchw8c(
    rows: *const *const f32,
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    geo: *const DwRowGeom,
    b0: usize,
    b1: usize,
) -> i32 {
    dw_rows(rows, w, y, res, bias, &*geo, (b0, b1), Path::best())
}

/// Computes units `u0..u1` of a whole depthwise conv on blocked data,
/// `x: [N, C/8, H, W, 8]` into `y: [N, C/8, OH, OW, 8]`: unit `(img *
/// C/8 + block) * OH + oy` is output row `oy` of one channel block of one
/// image, so a task's units are consecutive rows of a block (whose tap
/// rows the next row reads again from L1). The taps `w` are `[C/8][kh *
/// kw][8]`, `bias` (or null) `[C]`, `res` (or null) has `y`'s layout.
/// Each unit is one [`dnnc_dw_row_nchw8c`] row, its tap rows found here
/// (the descriptor's `zero` row where they fall in the padding), so one
/// call per task replaces a call per row. Returns 0, or 1 for a
/// descriptor it does not compute.
///
/// # Safety
/// As for [`dnnc_dw_row_nchw8c`], for every row the units reach; `x_block`
/// and `y_block` are ignored (the planes are `H x W` and `OH x OW`).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_dw_nchw8c(
    x: *const f32,
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    geo: *const DwRowGeom,
    u0: usize,
    u1: usize,
) -> i32 {
    dw_units(x, w, y, res, bias, &*geo, (u0, u1), Path::best())
}

/// [`dnnc_dw_nchw8c`] on `path`.
#[allow(clippy::too_many_arguments)]
unsafe fn dw_units(
    x: *const f32,
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    g: &DwRowGeom,
    (u0, u1): (usize, usize),
    path: Path,
) -> i32 {
    if !dw_row_fits(g) || g.sy == 0 || g.oh == 0 || g.blocks == 0 {
        return 1;
    }
    let (xa, xb) = interior(g);
    let padded =
        path != Path::Portable && (xa + g.ow - xb) * PADDED_BORDER >= g.ow && u1 - u0 >= g.kh;
    let mut ring = padded.then(|| PaddedRows::new(g));
    // The descriptor and interior columns the rows run with: padded rows
    // have no border pixels.
    let (gr, xs) = match &ring {
        Some(r) => (r.geom, (0, g.ow)),
        None => (*g, (xa, xb)),
    };
    let mut rows = [std::ptr::null::<f32>(); DW_ROW_MAX_KH];
    let rows = &mut rows[..g.kh];
    for u in u0..u1 {
        let (plane, oy) = (u / g.oh, u % g.oh);
        for (ky, r) in rows.iter_mut().enumerate() {
            let iy = (oy * g.sy + ky) as isize - g.pt as isize;
            *r = if iy < 0 || iy as usize >= g.h {
                gr.zero
            } else if let Some(ring) = &mut ring {
                ring.row(x, g, plane, iy as usize)
            } else {
                x.add((plane * g.h + iy as usize) * g.w * B)
            };
        }
        let out = (y, res, bias);
        unit_row(rows, w, out, (g, &gr), (plane, oy), xs, path);
    }
    0
}

/// Rows whose border pixels are at least one in this many run on
/// zero-padded copies of their tap rows ([`PaddedRows`]): a border
/// pixel is one dependent chain of multiply-adds, an interior group eight
/// chains in flight (a 7x7 map under a 5x5 window has 4 border pixels in
/// 7).
const PADDED_BORDER: usize = 8;

/// A task's zero-padded copies of the input rows of a whole conv: a ring
/// of `kh` rows `pl + w + pr` pixels wide (the padding columns stay
/// zero; a row is copied once per plane while consecutive units reuse
/// it), so every output pixel is an interior one. The padding's products
/// are the zero products the border pixels take, so results are bitwise
/// the same.
struct PaddedRows {
    /// `kh` ring slots, then a row of zeros for the padding rows.
    buf: Vec<f32>,
    /// Floats per padded row.
    row_len: usize,
    /// Which `plane * h + iy` each slot holds.
    held: [usize; DW_ROW_MAX_KH],
    /// The conv's descriptor on padded rows: `w` the padded width, no
    /// left padding, `zero` the ring's row of zeros.
    geom: DwRowGeom,
}

impl PaddedRows {
    fn new(g: &DwRowGeom) -> PaddedRows {
        let wp = ((g.ow - 1) * g.sx + g.kw).max(g.pl + g.w);
        let row_len = wp * B;
        let buf = vec![0f32; (g.kh + 1) * row_len];
        let zero = buf[g.kh * row_len..].as_ptr();
        PaddedRows {
            buf,
            row_len,
            held: [usize::MAX; DW_ROW_MAX_KH],
            geom: DwRowGeom {
                w: wp,
                pl: 0,
                zero,
                ..*g
            },
        }
    }

    /// The padded copy of input row `iy` of `plane` of `x` (conv `g`),
    /// copied into its slot unless the slot holds it already.
    ///
    /// # Safety
    /// `x` must address the conv's input.
    unsafe fn row(&mut self, x: *const f32, g: &DwRowGeom, plane: usize, iy: usize) -> *const f32 {
        let slot = iy % g.kh;
        let dst = self.buf.as_mut_ptr().add(slot * self.row_len);
        let key = plane * g.h + iy;
        if self.held[slot] != key {
            let src = x.add(key * g.w * B);
            std::ptr::copy_nonoverlapping(src, dst.add(g.pl * B), g.w * B);
            self.held[slot] = key;
        }
        dst
    }
}

/// Output row `oy` of `plane` (image `plane / blocks`, block `plane %
/// blocks`) of a whole conv `g` (`out`: `y`, residual and bias, each
/// null or whole), from its tap rows `rows`, computed with descriptor
/// `gr` (`g` itself, or its zero-padded form) over interior columns `xs`.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn unit_row(
    rows: &[*const f32],
    w: *const f32,
    (y, res, bias): (*mut f32, *const f32, *const f32),
    (g, gr): (&DwRowGeom, &DwRowGeom),
    (plane, oy): (usize, usize),
    xs: (usize, usize),
    path: Path,
) {
    let blk = plane % g.blocks;
    let off = (plane * g.oh + oy) * g.ow * B;
    let rb = if res.is_null() { res } else { res.add(off) };
    let bb = if bias.is_null() {
        bias
    } else {
        bias.add(blk * B)
    };
    let taps = w.add(blk * g.kh * g.kw * B);
    row_on(rows, taps, y.add(off), rb, bb, gr, xs, path);
}

/// One block's output row on `path` (see [`dnnc_dw_row_nchw8c`]).
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn row_on(
    rows: &[*const f32],
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    g: &DwRowGeom,
    (xa, xb): (usize, usize),
    path: Path,
) {
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => x86::row(rows, w, y, res, bias, g, (xa, xb)),
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => x86_vl::row(rows, w, y, res, bias, g, (xa, xb)),
        _ => {
            for ox in 0..g.ow {
                portable_pixel(rows, w, y, res, bias, g, ox);
            }
        }
    }
}

/// Which code computes the row (the tests run each on the same data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Portable,
    Avx2,
    /// The AVX2 row code compiled with AVX-512VL's registers.
    Avx512,
}

impl Path {
    fn best() -> Path {
        if super::avx512_vl() {
            return Path::Avx512;
        }
        if super::avx2_fma() {
            Path::Avx2
        } else {
            Path::Portable
        }
    }
}

/// Whether `g` is a geometry [`dnnc_dw_row_nchw8c`] computes: any row
/// of 1 to [`DW_ROW_MAX_KH`] filter rows, a positive stride and width
/// (border pixels read only their taps inside the row, so every width
/// and padding is safe).
pub fn dw_row_fits(g: &DwRowGeom) -> bool {
    g.kh > 0 && g.kh <= DW_ROW_MAX_KH && g.kw > 0 && g.sx > 0 && g.act <= pgemm::ACT_SILU
}

/// The first and one-past-last output columns whose whole window lies
/// inside the input row.
fn interior(g: &DwRowGeom) -> (usize, usize) {
    let xa = g.pl.div_ceil(g.sx).min(g.ow);
    let xb = if g.w + g.pl >= g.kw {
        ((g.w + g.pl - g.kw) / g.sx + 1).clamp(xa, g.ow)
    } else {
        xa
    };
    (xa, xb)
}

/// [`dnnc_dw_row_nchw8c`] on `path`.
#[allow(clippy::too_many_arguments)]
unsafe fn dw_rows(
    rows: *const *const f32,
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    g: &DwRowGeom,
    (b0, b1): (usize, usize),
    path: Path,
) -> i32 {
    if !dw_row_fits(g) {
        return 1;
    }
    let base = std::slice::from_raw_parts(rows, g.kh);
    let mut block_rows = [std::ptr::null::<f32>(); DW_ROW_MAX_KH];
    let block_rows = &mut block_rows[..g.kh];
    let (xa, xb) = interior(g);
    let taps = g.kh * g.kw * B;
    for b in b0..b1 {
        for (r, &p) in block_rows.iter_mut().zip(base) {
            *r = if p == g.zero { p } else { p.add(b * g.x_block) };
        }
        let yb = y.add(b * g.y_block);
        let rb = if res.is_null() {
            res
        } else {
            res.add(b * g.y_block)
        };
        let bb = if bias.is_null() {
            bias
        } else {
            bias.add(b * B)
        };
        row_on(block_rows, w.add(b * taps), yb, rb, bb, g, (xa, xb), path);
    }
    0
}

/// Output pixel `ox` one lane at a time, every tap (zero in the
/// padding).
unsafe fn portable_pixel(
    rows: &[*const f32],
    w: *const f32,
    y: *mut f32,
    res: *const f32,
    bias: *const f32,
    g: &DwRowGeom,
    ox: usize,
) {
    for l in 0..B {
        let mut acc = if bias.is_null() { 0.0 } else { *bias.add(l) };
        for (ky, &row) in rows.iter().enumerate() {
            for kx in 0..g.kw {
                let ix = (ox * g.sx + kx) as isize - g.pl as isize;
                let x = if ix < 0 || ix as usize >= g.w {
                    0.0
                } else {
                    *row.add(ix as usize * B + l)
                };
                acc = x.mul_add(*w.add((ky * g.kw + kx) * B + l), acc);
            }
        }
        if !res.is_null() {
            acc += *res.add(ox * B + l);
        }
        // `max(lo, v)` then `min(hi, v)` as the vector paths: a NaN sum
        // passes through.
        let v = if g.lo > acc { g.lo } else { acc };
        let v = if g.hi < v { g.hi } else { v };
        *y.add(ox * B + l) = pgemm::activate(g.act, v);
    }
}

/// One tap of a group's `$np` pixels (literal indices `$p`): pixel `p`'s
/// input vector, `$step` floats apart from `$r`, times the tap's filter
/// vector `$wv`, into accumulator `$acc[p]`. Outside [`row_code`], which
/// cannot hold a macro of its own.
#[cfg(target_arch = "x86_64")]
macro_rules! group_taps {
    (($acc:ident, $np:ident), ($r:ident, $step:ident), $wv:ident, $($p:literal)*) => {$(
        if $p < $np {
            let x = _mm256_loadu_ps($r.add($p * $step));
            $acc[$p] = _mm256_fmadd_ps(x, $wv, $acc[$p]);
        }
    )*};
}

/// The x86 row code, instantiated once per set of target features: the
/// same source, so the same operations and results.
macro_rules! row_code {
    ($features:literal) => {
    use super::{pgemm, DwRowGeom, B};
    use std::arch::x86_64::*;

    /// Where a row's results go: residual, clamp bounds, activation,
    /// output.
    struct Out {
        y: *mut f32,
        res: *const f32,
        lo: __m256,
        hi: __m256,
        act: u32,
    }

    impl Out {
        /// Pixel `ox`'s sum plus its residual, clamped, activated, stored.
        #[inline(always)]
        unsafe fn put(&self, ox: usize, mut v: __m256) {
            if !self.res.is_null() {
                v = _mm256_add_ps(v, _mm256_loadu_ps(self.res.add(ox * B)));
            }
            let v = _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, v));
            let v = match self.act {
                pgemm::ACT_SIGMOID => pgemm::x86::sigmoid8(v),
                pgemm::ACT_SILU => _mm256_mul_ps(v, pgemm::x86::sigmoid8(v)),
                _ => v,
            };
            _mm256_storeu_ps(self.y.add(ox * B), v);
        }

        /// [`Out::put`] for the `NP` pixels of a group from `ox` on, the
        /// activation's steps interleaved across them (`act8_n`, bitwise
        /// `sigmoid8`): one pixel's ~20-step chain, division included,
        /// would wait on itself.
        #[inline(always)]
        unsafe fn put_n<const NP: usize>(&self, ox: usize, acc: &[__m256; 8]) {
            let mut v = [_mm256_setzero_ps(); NP];
            for (p, v) in v.iter_mut().enumerate() {
                let mut a = acc[p];
                if !self.res.is_null() {
                    a = _mm256_add_ps(a, _mm256_loadu_ps(self.res.add((ox + p) * B)));
                }
                *v = _mm256_min_ps(self.hi, _mm256_max_ps(self.lo, a));
            }
            let v = match self.act {
                pgemm::ACT_SIGMOID => pgemm::x86::act8_n::<{ pgemm::ACT_SIGMOID }, NP>(v),
                pgemm::ACT_SILU => pgemm::x86::act8_n::<{ pgemm::ACT_SILU }, NP>(v),
                _ => v,
            };
            for (p, v) in v.iter().enumerate() {
                _mm256_storeu_ps(self.y.add((ox + p) * B), *v);
            }
        }
    }

    /// The row: border pixels one at a time with their valid taps, the
    /// interior in groups of 8 pixels (eight independent FMA chains, as
    /// many as two FMA pipes of latency 4 keep busy), then one group of
    /// the rest.
    #[target_feature(enable = $features)]
    pub(super) unsafe fn row(
        rows: &[*const f32],
        w: *const f32,
        y: *mut f32,
        res: *const f32,
        bias: *const f32,
        g: &DwRowGeom,
        xs: (usize, usize),
    ) {
        match g.kw {
            3 => row_k::<3>(rows, w, y, res, bias, g, xs),
            5 => row_k::<5>(rows, w, y, res, bias, g, xs),
            _ => row_k::<0>(rows, w, y, res, bias, g, xs),
        }
    }

    /// [`row`] with the filter width `KW` (see [`group`]).
    #[target_feature(enable = $features)]
    #[inline]
    unsafe fn row_k<const KW: usize>(
        rows: &[*const f32],
        w: *const f32,
        y: *mut f32,
        res: *const f32,
        bias: *const f32,
        g: &DwRowGeom,
        (xa, xb): (usize, usize),
    ) {
        let b = if bias.is_null() {
            _mm256_setzero_ps()
        } else {
            _mm256_loadu_ps(bias)
        };
        let out = Out {
            y,
            res,
            lo: _mm256_set1_ps(g.lo),
            hi: _mm256_set1_ps(g.hi),
            act: g.act,
        };
        for ox in (0..xa).chain(xb..g.ow) {
            out.put(ox, border(rows, w, b, g, ox));
        }
        let mut ox = xa;
        while ox + 8 <= xb {
            group::<8, KW>(rows, w, b, g, ox, &out);
            ox += 8;
        }
        // The rest as one group: its pixels' FMA chains interleave (a
        // lone pixel's taps are one dependent chain).
        match xb - ox {
            0 => {}
            1 => group::<1, KW>(rows, w, b, g, ox, &out),
            2 => group::<2, KW>(rows, w, b, g, ox, &out),
            3 => group::<3, KW>(rows, w, b, g, ox, &out),
            4 => group::<4, KW>(rows, w, b, g, ox, &out),
            5 => group::<5, KW>(rows, w, b, g, ox, &out),
            6 => group::<6, KW>(rows, w, b, g, ox, &out),
            _ => group::<7, KW>(rows, w, b, g, ox, &out),
        }
    }

    /// One border pixel: every tap, a zero vector for the columns
    /// outside the row (the padding's products, as the interior pixels
    /// of a padded row take them).
    #[target_feature(enable = $features)]
    unsafe fn border(
        rows: &[*const f32],
        w: *const f32,
        b: __m256,
        g: &DwRowGeom,
        ox: usize,
    ) -> __m256 {
        let x0 = (ox * g.sx) as isize - g.pl as isize;
        let kx0 = (-x0).clamp(0, g.kw as isize) as usize;
        let kx1 = (g.w as isize - x0).clamp(kx0 as isize, g.kw as isize) as usize;
        let zero = _mm256_setzero_ps();
        let mut acc = b;
        for (ky, &row) in rows.iter().enumerate() {
            for kx in 0..g.kw {
                let x = if (kx0..kx1).contains(&kx) {
                    _mm256_loadu_ps(row.offset((x0 + kx as isize) * B as isize))
                } else {
                    zero
                };
                acc = _mm256_fmadd_ps(x, _mm256_loadu_ps(w.add((ky * g.kw + kx) * B)), acc);
            }
        }
        acc
    }

    /// `NP` interior pixels from `ox` on, stored: per tap, the tap's
    /// filter vector and one input vector per pixel. Every accumulator
    /// access has a literal index (a loop index kept them in memory; see
    /// `blocked::avx2_tile_n`).
    /// `KW` is the filter's width when it is 3 or 5 (the loop over a
    /// tap row unrolled), else 0 (the descriptor's).
    #[target_feature(enable = $features)]
    #[inline(never)]
    unsafe fn group<const NP: usize, const KW: usize>(
        rows: &[*const f32],
        w: *const f32,
        b: __m256,
        g: &DwRowGeom,
        ox: usize,
        out: &Out,
    ) {
        let mut acc = [b; 8];
        let step = g.sx * B;
        let x0 = ox * g.sx - g.pl;
        let mut wp = w;
        let kw = if KW > 0 { KW } else { g.kw };
        for &row in rows {
            let mut r = row.add(x0 * B);
            for _ in 0..kw {
                let wv = _mm256_loadu_ps(wp);
                group_taps!((acc, NP), (r, step), wv, 0 1 2 3 4 5 6 7);
                r = r.add(B);
                wp = wp.add(B);
            }
        }
        out.put_n::<NP>(ox, &acc);
    }
    };
}

/// The row code on AVX2+FMA: 16 ymm registers.
#[cfg(target_arch = "x86_64")]
mod x86 {
    row_code!("avx2,fma");
}

/// The row code with AVX-512VL's 32 ymm registers (still 8-lane vectors):
/// a group's interleaved activation chains and constants fit in them
/// (a sigmoid loop measured 15 -> 10 cycles per vector with them).
#[cfg(target_arch = "x86_64")]
mod x86_vl {
    row_code!("avx2,fma,avx512f,avx512vl");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Input planes of `NB` blocks, `h x w` pixels each.
    const NB: usize = 3;

    /// The vector paths this machine runs (each compared bitwise with
    /// the portable one).
    fn vector_paths() -> Vec<Path> {
        match Path::best() {
            Path::Avx512 => vec![Path::Avx2, Path::Avx512],
            Path::Avx2 => vec![Path::Avx2],
            Path::Portable => Vec::new(),
        }
    }

    /// The fields only [`dnnc_dw_nchw8c`] reads, for row-call tests.
    const UNITS_UNUSED: DwRowGeom = DwRowGeom {
        w: 0,
        ow: 0,
        kh: 0,
        kw: 0,
        sx: 0,
        pl: 0,
        x_block: 0,
        y_block: 0,
        zero: std::ptr::null(),
        lo: 0.0,
        hi: 0.0,
        h: 0,
        oh: 0,
        sy: 0,
        pt: 0,
        blocks: 0,
        act: pgemm::ACT_NONE,
    };

    /// Activation `act` in f64 (the definition the kernels approximate).
    fn act_f64(act: u32, v: f64) -> f64 {
        let sig = 1.0 / (1.0 + (-v).exp());
        match act {
            pgemm::ACT_SIGMOID => sig,
            pgemm::ACT_SILU => v * sig,
            _ => v,
        }
    }

    /// The definition in f64 for block `b`: taps in the padding are zero.
    fn reference(
        x: &[f32],
        (h, iy0, b): (usize, isize, usize),
        w: &[f32],
        bias: &[f32],
        res: Option<&[f32]>,
        g: &DwRowGeom,
    ) -> Vec<f32> {
        let mut y = vec![0f32; g.ow * B];
        let taps = g.kh * g.kw * B;
        for ox in 0..g.ow {
            for l in 0..B {
                let mut acc = bias[b * B + l] as f64;
                for ky in 0..g.kh {
                    let iy = iy0 + ky as isize;
                    for kx in 0..g.kw {
                        let ix = (ox * g.sx + kx) as isize - g.pl as isize;
                        if iy < 0 || iy >= h as isize || ix < 0 || ix >= g.w as isize {
                            continue;
                        }
                        let at = b * g.x_block + (iy as usize * g.w + ix as usize) * B + l;
                        acc += x[at] as f64 * w[b * taps + (ky * g.kw + kx) * B + l] as f64;
                    }
                }
                if let Some(r) = res {
                    acc += r[b * g.y_block + ox * B + l] as f64;
                }
                let v = (acc as f32).max(g.lo).min(g.hi);
                y[ox * B + l] = act_f64(g.act, v as f64) as f32;
            }
        }
        y
    }

    /// Every window size, stride and padding the zoo's depthwise convs use
    /// and more (1x1 to 7x7, strides 1-3, rows wider and narrower than a
    /// pixel group, rows in the top and bottom padding), three blocks per
    /// call, with and without bias-residual-clamp, and with each
    /// activation: within 1e-5 of the f64 definition, and the AVX2 path
    /// bitwise the portable one. A call for one block writes that block's
    /// row only.
    #[test]
    fn rows_match_the_definition_on_every_path() {
        let mut cases = 0;
        let geoms = [
            (3, 1, 1),
            (3, 2, 1),
            (5, 1, 2),
            (5, 2, 2),
            (7, 1, 3),
            (1, 1, 0),
            (3, 3, 0),
            (5, 1, 0),
        ];
        for (k, sx, pad) in geoms {
            for w_in in [1usize, 3, 7, 14, 23, 56] {
                if w_in + 2 * pad < k {
                    continue;
                }
                let ow = (w_in + 2 * pad - k) / sx + 1;
                let h = k + 2;
                let x: Vec<f32> = (0..NB * h * w_in * B)
                    .map(|i| ((i * 7919) % 101) as f32 * 0.02 - 1.0)
                    .collect();
                let taps: Vec<f32> = (0..NB * k * k * B)
                    .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
                    .collect();
                let bias: Vec<f32> = (0..NB * B).map(|i| i as f32 * 0.05 - 0.2).collect();
                let zb = vec![0f32; NB * B];
                // Output rows one pixel apart beyond their width.
                let y_block = (ow + 1) * B;
                let res: Vec<f32> = (0..NB * y_block)
                    .map(|i| (i % 13) as f32 * 0.1 - 0.6)
                    .collect();
                let zero = vec![0f32; w_in * B];
                for iy0 in [-(pad as isize), 0, (h - k) as isize + pad as isize] {
                    for (full, act) in [
                        (false, pgemm::ACT_NONE),
                        (true, pgemm::ACT_NONE),
                        (true, pgemm::ACT_SIGMOID),
                        (false, pgemm::ACT_SILU),
                    ] {
                        let g = DwRowGeom {
                            w: w_in,
                            ow,
                            kh: k,
                            kw: k,
                            sx,
                            pl: pad,
                            x_block: h * w_in * B,
                            y_block,
                            zero: zero.as_ptr(),
                            lo: if full { -0.5 } else { f32::NEG_INFINITY },
                            hi: if full { 1.25 } else { f32::INFINITY },
                            act,
                            ..UNITS_UNUSED
                        };
                        let rows: Vec<*const f32> = (0..k)
                            .map(|ky| {
                                let iy = iy0 + ky as isize;
                                if iy < 0 || iy >= h as isize {
                                    zero.as_ptr()
                                } else {
                                    x[iy as usize * w_in * B..].as_ptr()
                                }
                            })
                            .collect();
                        let (bp, rp) = if full {
                            (bias.as_ptr(), res.as_ptr())
                        } else {
                            (std::ptr::null(), std::ptr::null())
                        };
                        let run = |path, (b0, b1)| {
                            let mut y = vec![f32::NAN; NB * y_block];
                            let rc = unsafe {
                                dw_rows(
                                    rows.as_ptr(),
                                    taps.as_ptr(),
                                    y.as_mut_ptr(),
                                    rp,
                                    bp,
                                    &g,
                                    (b0, b1),
                                    path,
                                )
                            };
                            assert_eq!(rc, 0);
                            y
                        };
                        let portable = run(Path::Portable, (0, NB));
                        for b in 0..NB {
                            let want = reference(
                                &x,
                                (h, iy0, b),
                                &taps,
                                if full { &bias } else { &zb },
                                full.then_some(&res[..]),
                                &g,
                            );
                            let got = &portable[b * y_block..b * y_block + ow * B];
                            for (i, (a, v)) in got.iter().zip(&want).enumerate() {
                                assert!(
                                    (a - v).abs() <= 1e-5 + 1e-5 * v.abs(),
                                    "k={k} sx={sx} w={w_in} iy0={iy0} act={act} block {b} element {i}: {a} vs {v}"
                                );
                            }
                        }
                        for path in vector_paths() {
                            let fast = run(path, (0, NB));
                            for (i, (a, v)) in fast.iter().zip(&portable).enumerate() {
                                assert_eq!(
                                    a.to_bits(),
                                    v.to_bits(),
                                    "{path:?} k={k} sx={sx} w={w_in} act={act} element {i}"
                                );
                            }
                        }
                        let one = run(Path::best(), (1, 2));
                        for (i, (a, v)) in one.iter().zip(&portable).enumerate() {
                            let in_block = (y_block..y_block + ow * B).contains(&i);
                            assert!(
                                if in_block {
                                    a.to_bits() == v.to_bits()
                                } else {
                                    a.is_nan()
                                },
                                "block 1 alone, element {i}"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 400, "{cases} cases");
        if vector_paths().len() < 2 {
            eprintln!(
                "rows_match_the_definition_on_every_path: ran {:?} besides the portable path (no AVX-512VL or no AVX2 here)",
                vector_paths()
            );
        }
    }

    /// The whole-conv entry: two images of two blocks, windows 3x3 and
    /// 5x5, strides 1 and 2, maps wider and narrower than a pixel group,
    /// units split mid-plane as tasks would split them, each activation:
    /// within 1e-5 of the f64 definition, the AVX2 path bitwise the
    /// portable one.
    #[test]
    fn whole_convs_match_the_definition() {
        let (n, blocks) = (2, 2);
        for (k, s, pad, hw, act) in [
            (3, 1, 1, 12, pgemm::ACT_NONE),
            (3, 2, 1, 9, pgemm::ACT_SILU),
            (5, 1, 2, 7, pgemm::ACT_SIGMOID),
            (5, 2, 2, 19, pgemm::ACT_SILU),
        ] {
            let oh = (hw + 2 * pad - k) / s + 1;
            let x: Vec<f32> = (0..n * blocks * hw * hw * B)
                .map(|i| ((i * 7919) % 101) as f32 * 0.02 - 1.0)
                .collect();
            let taps: Vec<f32> = (0..blocks * k * k * B)
                .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
                .collect();
            let bias: Vec<f32> = (0..blocks * B).map(|i| i as f32 * 0.05 - 0.2).collect();
            let len = n * blocks * oh * oh * B;
            let res: Vec<f32> = (0..len).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
            let zero = vec![0f32; hw * B];
            let g = DwRowGeom {
                w: hw,
                ow: oh,
                kh: k,
                kw: k,
                sx: s,
                pl: pad,
                x_block: 0,
                y_block: 0,
                zero: zero.as_ptr(),
                lo: -0.5,
                hi: 1.25,
                h: hw,
                oh,
                sy: s,
                pt: pad,
                blocks,
                act,
            };
            let mut want = vec![0f32; len];
            for plane in 0..n * blocks {
                let blk = plane % blocks;
                for oy in 0..oh {
                    for ox in 0..oh {
                        for l in 0..B {
                            let mut acc = bias[blk * B + l] as f64;
                            for ky in 0..k {
                                for kx in 0..k {
                                    let iy = (oy * s + ky) as isize - pad as isize;
                                    let ix = (ox * s + kx) as isize - pad as isize;
                                    if iy < 0 || ix < 0 || iy >= hw as isize || ix >= hw as isize {
                                        continue;
                                    }
                                    let xi =
                                        ((plane * hw + iy as usize) * hw + ix as usize) * B + l;
                                    let wi = (blk * k * k + ky * k + kx) * B + l;
                                    acc += x[xi] as f64 * taps[wi] as f64;
                                }
                            }
                            let i = ((plane * oh + oy) * oh + ox) * B + l;
                            acc += res[i] as f64;
                            let v = (acc as f32).clamp(-0.5, 1.25);
                            want[i] = act_f64(act, v as f64) as f32;
                        }
                    }
                }
            }
            let units = n * blocks * oh;
            let run = |path| {
                let mut y = vec![f32::NAN; len];
                for (u0, u1) in [(0, units / 3), (units / 3, units)] {
                    let rc = unsafe {
                        dw_units(
                            x.as_ptr(),
                            taps.as_ptr(),
                            y.as_mut_ptr(),
                            res.as_ptr(),
                            bias.as_ptr(),
                            &g,
                            (u0, u1),
                            path,
                        )
                    };
                    assert_eq!(rc, 0);
                }
                y
            };
            let portable = run(Path::Portable);
            for (i, (a, b)) in portable.iter().zip(&want).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                    "k={k} s={s} element {i}: {a} vs {b}"
                );
            }
            for path in vector_paths() {
                let fast = run(path);
                assert!(
                    fast.iter()
                        .zip(&portable)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{path:?} k={k} s={s}"
                );
            }
        }
    }

    /// What the row entry point (`rows`) or the whole-conv one returns
    /// for descriptor `g` given no buffers (only a refusal may return
    /// without reading them).
    fn entry_code(g: &DwRowGeom, rows: bool) -> i32 {
        let (null, out) = (std::ptr::null::<f32>(), std::ptr::null_mut());
        unsafe {
            if rows {
                dnnc_dw_row_nchw8c(std::ptr::null(), null, out, null, null, g, 0, 1)
            } else {
                dnnc_dw_nchw8c(null, null, out, null, null, g, 0, 1)
            }
        }
    }

    /// Descriptors they do not compute are refused with code 1, not read:
    /// both entry points for a bad row (an unknown activation included), the whole-conv one for a bad
    /// plane (zero row stride, output rows or blocks).
    #[test]
    fn refuses_what_it_does_not_compute() {
        let ok = DwRowGeom {
            w: 8,
            ow: 8,
            kh: 3,
            kw: 3,
            sx: 1,
            pl: 1,
            x_block: 64,
            y_block: 64,
            zero: std::ptr::null(),
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            h: 8,
            oh: 8,
            sy: 1,
            pt: 1,
            blocks: 1,
            act: pgemm::ACT_SILU,
        };
        assert!(dw_row_fits(&ok));
        for bad in [
            DwRowGeom { kh: 0, ..ok },
            DwRowGeom {
                kh: DW_ROW_MAX_KH + 1,
                ..ok
            },
            DwRowGeom { sx: 0, ..ok },
            DwRowGeom { kw: 0, ..ok },
            DwRowGeom {
                act: pgemm::ACT_SILU + 1,
                ..ok
            },
        ] {
            assert_eq!(entry_code(&bad, true), 1, "{bad:?}");
            assert_eq!(entry_code(&bad, false), 1, "{bad:?}");
        }
        for bad in [
            DwRowGeom { sy: 0, ..ok },
            DwRowGeom { oh: 0, ..ok },
            DwRowGeom { blocks: 0, ..ok },
        ] {
            assert_eq!(entry_code(&bad, false), 1, "{bad:?}");
        }
    }
}
