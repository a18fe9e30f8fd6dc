//! Fast convolution algorithms: Winograd F(m x m, 3 x 3) for m = 2, 4 and
//! whole-image FFT convolution.
//!
//! **Winograd** (Lavin & Gray). Filters are transformed once at compile
//! time, `U = G g Gᵀ`, and kept as a weight of `[group][α²]` blocks `U_s
//! (Co x Ci)` packed for `dnnc_sgemm_packed`, so each of the α² frequency
//! points is one GEMM `U_s · V_s (Ci x tiles)` that packs only `V_s`.
//! Per (image, group) the generated code
//! 1. per input channel copies the input into a zero-padded plane (any
//!    padding; the plane is large enough for whole tiles, so edge tiles
//!    need no special case), then transforms its tiles, `V = Bᵀ d B`, four
//!    tiles per f32x4,
//! 2. runs the α² GEMMs as one batch (`dnnc_sgemm_packed_batch`),
//! 3. per output channel transforms the products back, `Y = Aᵀ M A`, and
//!    runs the fused epilogue (bias, activations, residual adds): on
//!    groups of four tiles inside the output in registers, stored straight
//!    to the kernel's outputs; edge groups go to a staging plane, and the
//!    epilogue then runs over its edge strips (its crop to `H' x W'`
//!    handles partial edge tiles).
//!
//! **Phases** (one image and one group, i.e. batch-1 models): the kernel
//! is three phases of the runtime's phased-kernel ABI
//! (`dnnc_runtime::cpu`, "Phases"), so steps 1 and 3 split across
//! threads and the GEMMs split inside the batched call:
//! - phase 0, one unit per input channel: the padded copy into this
//!   task's own plane (`Emit::task_slice`), then the input transform of
//!   every tile of that channel;
//! - phase 1, extent 1: the batched GEMMs with the step's whole thread
//!   budget (the batch splits by whole GEMMs);
//! - phase 2, one unit per output channel: output transform into this
//!   task's staging plane, then the epilogue.
//!
//! Each unit is computed by the same code whatever the task count, so any
//! thread count gives bitwise the single-thread result.
//!
//! **Bands**: where one image's V and M outgrow the L2 and the
//! transformed filter is small beside them
//! ([`dnnc_passes::cost::winograd_bands`]), the image runs in bands of
//! tile rows instead of phases: each band copies the input rows its tiles
//! read, transforms them, runs the frequency GEMMs over its tiles and
//! transforms back with the epilogue (staged edge groups in a band-sized
//! staging plane, whose epilogue runs a tile row at a time), so V and M
//! stay in cache, and the bands are the kernel's task units (with the
//! images and groups), each core reading only what it wrote. Tiles are walked
//! by tile row in groups of four consecutive tiles, so a transform loads
//! contiguous row vectors and regroups them tile-per-lane with shuffles
//! (a 4x4 transpose for F(4x4), even/odd lanes for F(2x2)), and the output
//! transform regroups its results the other way and stores whole vectors.
//! A row's last group may run past the row's end: its extra lanes compute
//! throw-away tiles (zeros of the padded plane's right margin, which is
//! wide enough for whole groups) and store them where nothing reads them
//! later — the next row's first tiles of V, rewritten afterwards by the
//! same unit, spare columns of V and M (`ps` per row), or staging columns
//! past `W'`. The α² frequency blocks of V and M are an odd number of
//! cache lines apart (`block_stride`), so the α² streams a transform
//! touches do not alias in L1.
//!
//! Larger batches (or groups) run the same three steps in turn inside
//! one loop over (image, group) pairs, which the kernel splits across
//! tasks: each task has its own workspaces (`Emit::task_slice`) and runs
//! its GEMM batches on its own thread. That streams the transformed
//! filter once per image; where that costs more than taking every
//! image's V and M through memory ([`batches_images`], the cost model's
//! `winograd_shares_gemms`), the batch's images share one GEMM per
//! frequency instead: V and M hold image `i`'s tiles from column `i·p`
//! on (`p` tiles an image, no gaps), and the kernel is three phases over
//! input channels (each walking the images in order), the shared GEMMs,
//! and (image, output channel) units (ResNet-50's 7x7 convs at batch 8:
//! F(4x4) 15.0 → 3.8 ms, F(2x2) 7.05 → 5.7 ms at one thread).
//!
//! The transforms are straight-line code: F(2x2)'s derived from the
//! matrices in [`WINOGRAD`] (zero coefficients skipped, ±1 as add/sub),
//! F(4x4)'s `Bᵀ` and `Aᵀ` written out with shared subexpressions and
//! fused multiply-adds (`bt_apply`, `at_apply`; the table test below
//! checks the matrices they implement, the conv tests the code).
//!
//! **FFT**: the native helper `dnnc_runtime::cpu::fftconv::dnnc_fft_conv`
//! per (image, group) with the filter spectra precomputed at compile time,
//! then the usual epilogue on the group's output.

use super::contraction::{
    at, copy_run, pack_blocks_in, packed_stride_in, tile_epilogue, zero_run, ConvGeom,
};
use super::elementwise::{self, bcast_strides, Operand, SubDomain};
use super::emit::{mem, Emit};
use super::KCtx;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32X4, I32, I64};
use cranelift_codegen::ir::{AbiParam, InstBuilder, Signature, Value};
use dnnc_ir::op::{ConvAlgo as IrAlgo, DataLayout};
use dnnc_ir::DType;
use dnnc_runtime::cpu::{fftconv, pgemm, AlignedBuf};

/// The matrices of one Winograd algorithm F(m x m, r x r): output tile `m`,
/// input tile `α = m + r - 1`; `y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`.
pub(crate) struct Winograd {
    /// Output tile size.
    pub m: usize,
    /// Input tile size α.
    pub alpha: usize,
    /// `Bᵀ`, α x α.
    pub bt: &'static [&'static [f64]],
    /// `G`, α x r.
    pub g: &'static [&'static [f64]],
    /// `Aᵀ`, m x α.
    pub at: &'static [&'static [f64]],
}

/// F(2x2, 3x3), interpolation points 0, 1, -1, ∞.
const F2: Winograd = Winograd {
    m: 2,
    alpha: 4,
    bt: &[
        &[1.0, 0.0, -1.0, 0.0],
        &[0.0, 1.0, 1.0, 0.0],
        &[0.0, -1.0, 1.0, 0.0],
        &[0.0, 1.0, 0.0, -1.0],
    ],
    g: &[
        &[1.0, 0.0, 0.0],
        &[0.5, 0.5, 0.5],
        &[0.5, -0.5, 0.5],
        &[0.0, 0.0, 1.0],
    ],
    at: &[&[1.0, 1.0, 1.0, 0.0], &[0.0, 1.0, -1.0, -1.0]],
};

/// F(4x4, 3x3), interpolation points 0, ±1, ±2, ∞ (Lavin & Gray).
const F4: Winograd = Winograd {
    m: 4,
    alpha: 6,
    bt: &[
        &[4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        &[0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        &[0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        &[0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        &[0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        &[0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ],
    g: &[
        &[1.0 / 4.0, 0.0, 0.0],
        &[-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        &[-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        &[1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        &[1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        &[0.0, 0.0, 1.0],
    ],
    at: &[
        &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        &[0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        &[0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        &[0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ],
};

/// Every Winograd algorithm the backend generates, by output tile size.
pub(crate) const WINOGRAD: [&Winograd; 2] = [&F2, &F4];

fn winograd(m: usize) -> &'static Winograd {
    WINOGRAD.into_iter().find(|w| w.m == m).unwrap_or(&F4)
}

/// Tile grid and buffer layout of one convolution. Tiles are `th x tw`
/// output tiles of `m x m`, `p` in all, processed by tile row in groups
/// of four consecutive tiles, `tw4` a row (`tw` rounded up to 4); the
/// lanes past a row's end compute throw-away tiles whose results land in
/// slack (module docs).
struct Tiling {
    /// Tile rows.
    th: usize,
    /// Tiles per row.
    tw: usize,
    /// Tiles in all.
    p: usize,
    /// Tiles per row rounded up to 4.
    tw4: usize,
    /// Rows of the padded input plane (whole tiles plus the 2-pixel halo).
    hp: usize,
    /// Width of the padded input plane: whole groups plus the halo and the
    /// columns the vector loads of a row's last group touch.
    xw: usize,
    /// Width of the staging output plane.
    zw: usize,
    /// Images whose tiles share one set of frequency GEMMs (1, or the
    /// batch when [`batches_images`] says so); image `i`'s tiles start at
    /// column `i * p`, packed without gaps: the last tile row's overhang
    /// of one image lands on the next image's first tiles, which the same
    /// transform unit writes afterwards (one unit per input channel walks
    /// the images in order), and the last image's in the spare columns
    /// past them.
    imgs: usize,
    /// Row stride of V and M: `(imgs - 1) * p` plus one image's tiles
    /// and the last tile row's overhang
    /// ([`dnnc_passes::cost::winograd_image_columns`]), or where the
    /// image runs in bands, one band's tiles and overhang
    /// ([`dnnc_passes::cost::winograd_band_columns`]).
    rs: usize,
    /// Tile rows of the largest band: `th` where the image is one band.
    bt: usize,
    /// Bands per image ([`dnnc_passes::cost::winograd_bands`]); band `b`
    /// has tile rows `[b·th/nb, (b+1)·th/nb)`
    /// ([`dnnc_passes::cost::winograd_band_span`]).
    nb: usize,
}

fn tiling(geo: &ConvGeom, m: usize) -> Tiling {
    let (th, tw) = (geo.oh.div_ceil(m), geo.ow.div_ceil(m));
    let tw4 = tw.div_ceil(4) * 4;
    let p = th * tw;
    // The cost model counts the same columns.
    let ps = dnnc_passes::cost::winograd_image_columns(&geo.shape(), m) as usize;
    debug_assert_eq!(ps, (p + tw4 - tw).div_ceil(4) * 4);
    let imgs = if batches_images(geo, m) { geo.n } else { 1 };
    let nb = (dnnc_passes::cost::winograd_bands(&geo.shape(), m) as usize).max(1);
    let bt = th.div_ceil(nb);
    let rs = if nb > 1 {
        dnnc_passes::cost::winograd_band_columns(&geo.shape(), m) as usize
    } else {
        (imgs - 1) * p + ps
    };
    Tiling {
        th,
        tw,
        p,
        tw4,
        hp: bt * m + 2,
        xw: tw4 * m + 4,
        zw: tw4 * m,
        imgs,
        rs,
        bt,
        nb,
    }
}

/// Whether a batch's images share their frequency GEMMs (one GEMM per
/// frequency over every image's tiles) instead of running them image by
/// image: the cost model's rule, [`dnnc_passes::cost::winograd_shares_gemms`],
/// so it prices what runs.
fn batches_images(geo: &ConvGeom, m: usize) -> bool {
    dnnc_passes::cost::winograd_shares_gemms(&geo.shape(), m)
}

/// Stride of the α² frequency blocks of V or M (`rows` rows of `ps`):
/// whole cache lines, an odd number of them, so the α² streams a
/// transform step touches fall into different L1 sets instead of
/// aliasing at multiples of 4 KiB.
fn block_stride(rows: usize, ps: usize) -> usize {
    let lines = (rows * ps).div_ceil(16);
    (lines | 1) * 16
}

/// Whether the kernel is lowered as three phases (one image and group,
/// as batch-1 models have, or a batch whose images share their GEMMs);
/// other batches loop over (image, group) in one call.
fn is_phased(geo: &ConvGeom, t: &Tiling) -> bool {
    (geo.n * geo.g == 1 && t.nb == 1) || t.imgs > 1
}

/// Workspace bytes: one padded input plane, transformed input V, products
/// M, one staging output plane. A phased kernel gives each task its own
/// padded and staging plane, one split over images every workspace
/// (`Emit::task_slice`; the runtime multiplies those sizes by the task
/// count).
pub(crate) fn workspaces(geo: &ConvGeom, m: usize) -> Vec<usize> {
    let w = winograd(m);
    let t = tiling(geo, m);
    let (cg, mg) = geo.per_group();
    let a2 = w.alpha * w.alpha;
    // A channel-blocked conv keeps a block's eight padded and staging
    // planes.
    let planes = if blocked_m(geo).is_some() { B } else { 1 };
    vec![
        planes * t.hp * t.xw * 4,
        a2 * block_stride(cg, t.rs) * 4,
        a2 * block_stride(mg, t.rs) * 4,
        planes * t.bt * m * t.zw * 4,
    ]
}

/// Channels per block of the blocked layout.
const B: usize = DataLayout::BLOCK;

/// The output tile size of a channel-blocked (`data=nchw8c`) Winograd
/// conv, which reads and writes the blocked layout (module docs,
/// "Channel-blocked"); `None` for any other conv.
pub(crate) fn blocked_m(geo: &ConvGeom) -> Option<usize> {
    use dnnc_passes::block_channels::{blocked_kernel, winograd_algo, BlockedKernel};
    if geo.p.data != DataLayout::Nchw8c || blocked_kernel(geo) != Some(BlockedKernel::Winograd) {
        return None;
    }
    // `algo=auto` where the heuristic picks Winograd, as the pass
    // resolves it; any other algorithm is refused by
    // `block_channels::unfit` in the blocked lowering.
    match winograd_algo(geo)? {
        IrAlgo::Winograd2 => Some(2),
        IrAlgo::Winograd4 => Some(4),
        _ => None,
    }
}

/// Compile-time weights: `U = G g Gᵀ` (computed in f64) as `[group][α²]`
/// packed `Co x Ci` blocks ([`pack_blocks_in`]).
pub(crate) fn prepared(geo: &ConvGeom, m: usize, w: &[f32]) -> Vec<AlignedBuf> {
    let wn = winograd(m);
    let a = wn.alpha;
    let (cg, mg) = geo.per_group();
    let mut u = vec![0f32; geo.g * a * a * mg * cg];
    for co in 0..geo.m {
        let (gi, mo) = (co / mg, co % mg);
        for ci in 0..cg {
            let f = &w[(co * cg + ci) * 9..(co * cg + ci + 1) * 9];
            // t = G f (α x 3), then U = t Gᵀ (α x α).
            let mut t = vec![[0f64; 3]; a];
            for (i, row) in t.iter_mut().enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (0..3).map(|k| wn.g[i][k] * f[k * 3 + j] as f64).sum();
                }
            }
            for (i, ti) in t.iter().enumerate() {
                for j in 0..a {
                    let v: f64 = (0..3).map(|k| ti[k] * wn.g[j][k]).sum();
                    let s = i * a + j;
                    u[((gi * a * a + s) * mg + mo) * cg + ci] = v as f32;
                }
            }
        }
    }
    let offs: Vec<usize> = (0..geo.g * a * a).map(|b| b * mg * cg).collect();
    vec![pack_blocks_in(
        u_layout(geo, m),
        (mg, cg),
        &u,
        &offs,
        (cg, 1),
        1.0,
    )]
}

/// The layout of the packed `U` blocks: [`pgemm::Layout::choose`] for one
/// frequency GEMM (`M/G x tiles x C/G`). ResNet-18's 28x28 convs in
/// F(4x4) have 49 tiles, where the lanes layout wastes no lanes (128 x 49
/// x 128, hot: 152 → 186 GFLOP/s).
fn u_layout(geo: &ConvGeom, m: usize) -> pgemm::Layout {
    let (cg, mg) = geo.per_group();
    let t = tiling(geo, m);
    let cols = if t.nb > 1 { t.bt * t.tw } else { t.imgs * t.p };
    pgemm::Layout::choose(mg, cols, cg)
}

/// `sum_k coef[k] * xs[k]` on f32x4 values: zero coefficients skipped,
/// ±1 as add/sub, the rest multiplied by a splat constant.
fn lin(e: &mut Emit<'_>, coef: &[f64], xs: &[Value]) -> Value {
    let mut acc: Option<Value> = None;
    for (&c, &x) in coef.iter().zip(xs) {
        if c == 0.0 {
            continue;
        }
        acc = Some(match (acc, c) {
            (None, 1.0) => x,
            (None, -1.0) => e.b.ins().fneg(x),
            (Some(a), 1.0) => e.b.ins().fadd(a, x),
            (Some(a), -1.0) => e.b.ins().fsub(a, x),
            (a, c) => {
                let k = e.vf(c as f32);
                let t = e.b.ins().fmul(x, k);
                match a {
                    Some(a) => e.b.ins().fadd(a, t),
                    None => t,
                }
            }
        });
    }
    acc.unwrap_or_else(|| e.vf(0.0))
}

/// F(4x4)'s `Bᵀ d` with shared subexpressions and fused multiply-adds
/// (12 operations instead of 28); other algorithms through [`lin`] row by
/// row.
fn bt_apply(e: &mut Emit<'_>, wn: &Winograd, d: &[Value]) -> Vec<Value> {
    if wn.m != 4 {
        return wn.bt.iter().map(|row| lin(e, row, d)).collect();
    }
    let (k2, k4, n2, n4) = (e.vf(2.0), e.vf(4.0), e.vf(-2.0), e.vf(-4.0));
    // Rows of Bᵀ: 4(d0-d2)+(d4-d2), (d4-4d2)±(d3-4d1), (d4-d2)±2(d3-d1),
    // -4(d3-d1)+(d5-d3).
    let c = e.b.ins().fsub(d[4], d[2]);
    let t = e.b.ins().fsub(d[0], d[2]);
    let r0 = e.b.ins().fma(t, k4, c);
    let a = e.b.ins().fma(d[2], n4, d[4]);
    let bb = e.b.ins().fma(d[1], n4, d[3]);
    let r1 = e.b.ins().fadd(a, bb);
    let r2 = e.b.ins().fsub(a, bb);
    let t = e.b.ins().fsub(d[3], d[1]);
    let r3 = e.b.ins().fma(t, k2, c);
    let r4 = e.b.ins().fma(t, n2, c);
    let u = e.b.ins().fsub(d[5], d[3]);
    let r5 = e.b.ins().fma(t, n4, u);
    vec![r0, r1, r2, r3, r4, r5]
}

/// F(4x4)'s `Aᵀ m` with shared subexpressions and fused multiply-adds
/// (10 operations instead of 15); other algorithms through [`lin`] row by
/// row.
fn at_apply(e: &mut Emit<'_>, wn: &Winograd, x: &[Value]) -> Vec<Value> {
    if wn.m != 4 {
        return wn.at.iter().map(|row| lin(e, row, x)).collect();
    }
    let (k2, k4, k8) = (e.vf(2.0), e.vf(4.0), e.vf(8.0));
    // Rows of Aᵀ: x0+(x1+x2)+(x3+x4), (x1-x2)+2(x3-x4), (x1+x2)+4(x3+x4),
    // (x1-x2)+8(x3-x4)+x5.
    let s12 = e.b.ins().fadd(x[1], x[2]);
    let d12 = e.b.ins().fsub(x[1], x[2]);
    let s34 = e.b.ins().fadd(x[3], x[4]);
    let d34 = e.b.ins().fsub(x[3], x[4]);
    let t = e.b.ins().fadd(x[0], s12);
    let y0 = e.b.ins().fadd(t, s34);
    let y1 = e.b.ins().fma(d34, k2, d12);
    let y2 = e.b.ins().fma(s34, k4, s12);
    let t = e.b.ins().fma(d34, k8, d12);
    let y3 = e.b.ins().fadd(t, x[5]);
    vec![y0, y1, y2, y3]
}

/// 4x4 transpose (unpack low/high, then 64-bit low/high: 8 shuffles).
fn transpose4(e: &mut Emit<'_>, r: [Value; 4]) -> [Value; 4] {
    let t0 = e.shuffle4(r[0], r[1], [0, 4, 1, 5]);
    let t1 = e.shuffle4(r[2], r[3], [0, 4, 1, 5]);
    let t2 = e.shuffle4(r[0], r[1], [2, 6, 3, 7]);
    let t3 = e.shuffle4(r[2], r[3], [2, 6, 3, 7]);
    [
        e.shuffle4(t0, t1, [0, 1, 4, 5]),
        e.shuffle4(t0, t1, [2, 3, 6, 7]),
        e.shuffle4(t2, t3, [0, 1, 4, 5]),
        e.shuffle4(t2, t3, [2, 3, 6, 7]),
    ]
}

/// Element offsets, relative to a group's first column, of the row
/// vectors the input transform of four consecutive tiles loads.
fn group_loads(m: usize) -> &'static [i64] {
    if m == 4 {
        &[0, 4, 8, 12, 16]
    } else {
        &[0, 4, 2, 6]
    }
}

/// Input transform of four consecutive tiles of one row of the padded
/// plane, `a` the byte address of their top-left pixel: `α` rows of
/// contiguous vectors, the column pass `Bᵀ d` on them as loaded, then the
/// lanes regrouped (tile per lane) by shuffles, then the row pass.
/// Returns `V[i][j]`, tile per lane.
fn input_group(e: &mut Emit<'_>, wn: &Winograd, a: Value, xw: usize) -> Vec<Vec<Value>> {
    let al = wn.alpha;
    let pos = group_loads(wn.m);
    // cols[v][i]: column pass on the vectors loaded at pos[v].
    let cols: Vec<Vec<Value>> = pos
        .iter()
        .map(|&o| {
            let d: Vec<Value> = (0..al)
                .map(|k| {
                    let off = ((k as i64 * xw as i64 + o) * 4) as i32;
                    e.b.ins().load(F32X4, mem(), a, off)
                })
                .collect();
            bt_apply(e, wn, &d)
        })
        .collect();
    (0..al)
        .map(|i| {
            let js: Vec<Value> = if wn.m == 4 {
                let c = transpose4(e, [cols[0][i], cols[1][i], cols[2][i], cols[3][i]]);
                let u0 = e.shuffle4(cols[1][i], cols[2][i], [0, 4, 1, 5]);
                let u1 = e.shuffle4(cols[3][i], cols[4][i], [0, 4, 1, 5]);
                let j4 = e.shuffle4(u0, u1, [0, 1, 4, 5]);
                let j5 = e.shuffle4(u0, u1, [2, 3, 6, 7]);
                vec![c[0], c[1], c[2], c[3], j4, j5]
            } else {
                let (a0, a1, b0, b1) = (cols[0][i], cols[1][i], cols[2][i], cols[3][i]);
                vec![
                    e.shuffle4(a0, a1, [0, 2, 4, 6]),
                    e.shuffle4(a0, a1, [1, 3, 5, 7]),
                    e.shuffle4(b0, b1, [0, 2, 4, 6]),
                    e.shuffle4(b0, b1, [1, 3, 5, 7]),
                ]
            };
            bt_apply(e, wn, &js)
        })
        .collect()
}

/// Output row `y[j]` (tile per lane, `j < m`) of four consecutive tiles
/// regrouped pixel-contiguous by shuffles: `m` vectors, 4 pixels each,
/// left to right.
fn out_row_vectors(e: &mut Emit<'_>, y: &[Value]) -> Vec<Value> {
    if y.len() == 4 {
        transpose4(e, [y[0], y[1], y[2], y[3]]).to_vec()
    } else {
        let lo = e.shuffle4(y[0], y[1], [0, 4, 1, 5]);
        let hi = e.shuffle4(y[0], y[1], [2, 6, 3, 7]);
        vec![lo, hi]
    }
}

/// Lowers a 3x3 stride-1 convolution with Winograd F(m x m, 3 x 3):
/// three phases for one image and group, else one loop over (image,
/// group, band) running the same three steps in turn (module docs).
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geo: &ConvGeom,
    m: usize,
) -> Result<(), String> {
    let wn = winograd(m);
    let t = tiling(geo, m);
    let node = c.g.node(c.k.nodes[0]);
    if c.ws.len() < 4 || c.prep.is_empty() {
        return Err("missing Winograd buffers".into());
    }
    let x = e.bufs[c.arg(node.inputs[0])?];
    let blocked = blocked_m(geo).is_some();
    let (spec, native, out8) = if blocked {
        (None, None, Some(blocked_out(e, c, geo, &t, m)?))
    } else {
        let spec = staged_epilogue(c, geo, &t)?;
        (Some(spec), native_out(e, c, geo, &t, m)?, None)
    };
    let native_in = native_rows(&t, m);
    let w = Wino {
        wn,
        geo,
        t: &t,
        x,
        xs: c.plane_stride(node.inputs[0]),
        native,
        native_in,
        out8,
        ws: workspaces(geo, m),
        args: [c.ws[0], c.ws[1], c.ws[2], c.ws[3]],
        u: c.prep[0],
        spec: spec.as_ref(),
    };
    // Transform units: channels, or blocks of 8 channels when blocked.
    let per = if blocked { B } else { 1 };
    if is_phased(geo, &t) && t.imgs > 1 {
        // The batch's images share the GEMMs: (image, channel) units
        // for the transforms.
        let (cg, mg) = geo.per_group();
        let imgs = t.imgs;
        let zero = e.ci(0);
        let all_rows = e.ci(t.th as i64);
        // One unit per input channel, walking the images in order: an
        // image's overhanging tiles land on the next image's first ones,
        // which the unit writes afterwards.
        e.phase(
            cg / per,
            "input channels of every image (transform)",
            |e, lo, hi| {
                let xb = e.bufs[w.args[0]];
                let xp = e.task_slice(w.args[0], xb, w.ws[0]);
                e.for_range(lo, hi, 1, |e, ci| {
                    let c1 = e.b.ins().iadd_imm_s(ci, 1);
                    e.for_n(imgs, |e, n| {
                        let cbase = e.b.ins().imul_imm_s(n, (geo.c / per) as i64);
                        w.input(e, xp, (cbase, n), (ci, c1), (zero, all_rows));
                    });
                });
                Ok(())
            },
        )?;
        e.phase(
            1,
            "the frequency GEMMs over every image, split inside the GEMM call",
            |e, _, _| {
                let cols = e.ci((imgs * t.p) as i64);
                w.gemm(e, zero, cols);
                Ok(())
            },
        )?;
        let mut err = None;
        let units = mg / per;
        e.phase(
            imgs * units,
            "images x output channels (inverse transform)",
            |e, lo, hi| {
                let zb = e.bufs[w.args[3]];
                let zp = e.task_slice(w.args[3], zb, w.ws[3]);
                e.bufs[w.args[3]] = zp;
                e.for_range(lo, hi, 1, |e, u| {
                    let n = e.b.ins().udiv_imm_u(u, units as i64);
                    let mo = e.b.ins().urem_imm_u(u, units as i64);
                    let m1 = e.b.ins().iadd_imm_s(mo, 1);
                    if let Err(m) = w.output(e, n, zero, (mo, m1), (zero, all_rows)) {
                        err.get_or_insert(m);
                    }
                });
                e.bufs[w.args[3]] = zb;
                Ok(())
            },
        )?;
        return err.map_or(Ok(()), Err);
    }
    if is_phased(geo, &t) {
        let (cg, mg) = geo.per_group();
        let zero = e.ci(0);
        let all_rows = e.ci(t.th as i64);
        e.phase(cg / per, "input channels (transform)", |e, lo, hi| {
            let xb = e.bufs[w.args[0]];
            let xp = e.task_slice(w.args[0], xb, w.ws[0]);
            w.input(e, xp, (zero, zero), (lo, hi), (zero, all_rows));
            Ok(())
        })?;
        e.phase(
            1,
            "the frequency GEMMs, split inside the GEMM call",
            |e, _, _| {
                let cols = e.ci(t.p as i64);
                w.gemm(e, zero, cols);
                Ok(())
            },
        )?;
        return e.phase(
            mg / per,
            "output channels (inverse transform)",
            |e, lo, hi| {
                let zb = e.bufs[w.args[3]];
                let zp = e.task_slice(w.args[3], zb, w.ws[3]);
                // The epilogue reads the staging plane through its argument.
                e.bufs[w.args[3]] = zp;
                let r = w.output(e, zero, zero, (lo, hi), (zero, all_rows));
                e.bufs[w.args[3]] = zb;
                r
            },
        );
    }
    // Several images or groups, or bands of tile rows: the kernel splits
    // over (image, group, band) units, each task with its own padded
    // plane, V, M and staging plane and running its GEMM batches on its
    // own thread (a batch-8 ResNet-50 bottleneck's 3x3 conv ran on one
    // thread at any thread count).
    let mut err = None;
    let nb = t.nb;
    let unit = if nb > 1 {
        "images x groups x bands of tile rows"
    } else {
        "images x groups"
    };
    let (lo, hi) = e.task_range(geo.n * geo.g * nb, unit)?;
    let bases: Vec<Value> = (0..4)
        .map(|a| {
            let base = e.bufs[w.args[a]];
            let slice = e.task_slice(w.args[a], base, w.ws[a]);
            e.bufs[w.args[a]] = slice;
            base
        })
        .collect();
    e.for_range(lo, hi, 1, |e, u| {
        let ng = e.b.ins().udiv_imm_u(u, nb as i64);
        let band = e.b.ins().urem_imm_u(u, nb as i64);
        let n = e.b.ins().udiv_imm_u(ng, geo.g as i64);
        let gi = e.b.ins().urem_imm_u(ng, geo.g as i64);
        // The band's tile rows (`cost::winograd_band_span`).
        let r0 = e.b.ins().imul_imm_s(band, t.th as i64);
        let r0 = e.b.ins().udiv_imm_u(r0, nb as i64);
        let b1 = e.b.ins().iadd_imm_s(band, 1);
        let r1 = e.b.ins().imul_imm_s(b1, t.th as i64);
        let r1 = e.b.ins().udiv_imm_u(r1, nb as i64);
        let rows = e.b.ins().isub(r1, r0);
        let (cg, mg) = geo.per_group();
        let xp = e.bufs[w.args[0]];
        let (lo, ci, co) = (e.ci(0), e.ci((cg / per) as i64), e.ci((mg / per) as i64));
        let t0 = e.b.ins().imul_imm_s(n, (geo.c / per) as i64);
        let t1 = e.b.ins().imul_imm_s(gi, (cg / per) as i64);
        let cbase = e.b.ins().iadd(t0, t1);
        let z = e.ci(0);
        w.input(e, xp, (cbase, z), (lo, ci), (r0, rows));
        let cols = e.b.ins().imul_imm_s(rows, t.tw as i64);
        w.gemm(e, gi, cols);
        let co0 = e.b.ins().imul_imm_s(gi, mg as i64);
        if let Err(m) = w.output(e, n, co0, (lo, co), (r0, rows)) {
            err.get_or_insert(m);
        }
    });
    for (a, b) in bases.into_iter().enumerate() {
        e.bufs[w.args[a]] = b;
    }
    err.map_or(Ok(()), Err)
}

/// The epilogue of a plain-layout kernel over its staging plane (strides
/// `(0, 0, zw, 1)`): the conv's bias and its fused ops, into the kernel's
/// results.
fn staged_epilogue<'g>(
    c: &KCtx<'g>,
    geo: &ConvGeom,
    t: &Tiling,
) -> Result<elementwise::EwSpec<'g>, String> {
    let node = c.g.node(c.k.nodes[0]);
    let a = node.outputs[0];
    let domain = c.g.value(a).ty.shape.clone();
    let zop = Operand {
        arg: c.ws[3],
        dtype: DType::F32,
        strides: vec![0, 0, t.zw as i64, 1],
    };
    let bias = match node.inputs.get(2) {
        Some(&b) => Some((
            Operand {
                arg: c.arg(b)?,
                dtype: DType::F32,
                strides: bcast_strides(&[geo.m, 1, 1], &domain)
                    .ok_or("bias does not broadcast to the result")?,
            },
            1.0,
        )),
        None => None,
    };
    let mut spec = elementwise::spec_for(
        c.g,
        &domain,
        &c.k.nodes[1..],
        &c.arg_of,
        vec![(a, zop, bias)],
        &c.k.outputs,
    )?;
    // Results stored with padded planes (`planes`): their planes lie
    // that far apart, rows and columns as dense.
    for (v, o) in &mut spec.outputs {
        if let (&[_, ch, _, w], 4) = (c.g.value(*v).ty.shape.as_slice(), o.strides.len()) {
            let ps = c.plane_stride(*v) as i64;
            o.strides = vec![ch as i64 * ps, ps, w as i64, 1];
        }
    }
    Ok(spec)
}

/// Where and how a channel-blocked kernel's output step writes (see
/// [`blocked_out`]).
struct BlockedOut<'g> {
    /// The blocked rows' buffer: the kernel's result, or the accumulator
    /// that `post` reads.
    y: Value,
    /// Floats from one channel block of `y` (and of `res`) to the next.
    ys: usize,
    /// The conv's bias (one f32 per output channel), if it has one.
    bias: Option<Value>,
    /// The residual (blocked like `y`), if the fused epilogue adds one.
    res: Option<Value>,
    /// The clamp's bounds (`-inf`, `inf` without one).
    lo: f32,
    hi: f32,
    /// The generated epilogue over each output row of a block, for fused
    /// ops beyond bias, residual and clamp (it reads `y`).
    post: Option<elementwise::EwSpec<'g>>,
    /// F(4x4)'s output transform on the native AVX-512 kernel.
    native: bool,
}

/// The output step of channel-blocked kernel `c`: bias, residual and
/// clamp where the fused ops are those ([`super::contraction::match_fused`],
/// no activation after the clamp), else the bias alone into the
/// accumulator and the fused ops as a generated epilogue on each row.
fn blocked_out<'g>(
    e: &Emit<'_>,
    c: &KCtx<'g>,
    geo: &ConvGeom,
    t: &Tiling,
    m: usize,
) -> Result<BlockedOut<'g>, String> {
    let g = c.g;
    let node = g.node(c.k.nodes[0]);
    if geo.g != 1 {
        return Err("a channel-blocked Winograd conv has one group".into());
    }
    let bias = match node.inputs.get(2) {
        Some(&b) => {
            let ty = &g.value(b).ty;
            if ty.dtype != DType::F32 || ty.shape != [geo.m] {
                return Err(format!("bias must be f32[{}]", geo.m));
            }
            Some(e.bufs[c.arg(b)?])
        }
        None => None,
    };
    let native =
        m == 4 && t.tw >= NATIVE_OUT_MIN_TILES && dnnc_runtime::cpu::wino::winograd4_out_row_runs();
    let fused = super::contraction::match_fused(c, node.inputs.get(2).copied())
        .filter(|f| f.act == pgemm::ACT_NONE);
    let (y, res, lo, hi, post) = match fused {
        Some(f) => {
            let out = *c.k.outputs.first().ok_or("no result")?;
            let res = match f.res {
                Some(r) => Some((e.bufs[c.arg(r)?], r)),
                None => None,
            };
            (c.arg(out)?, res, f.lo, f.hi, None)
        }
        None => {
            let acc = super::contraction::acc_arg(c)?;
            let post = super::contraction::epilogue(c, acc, None)?;
            (acc, None, f32::NEG_INFINITY, f32::INFINITY, post)
        }
    };
    let out = node.outputs[0];
    // A blocked value's "plane" is a channel block, `[H][W][8]`.
    let ys = c.plane_stride(out);
    if let Some((_, r)) = res {
        if c.plane_stride(r) != ys {
            return Err("the residual must be stored as the result is".into());
        }
    }
    Ok(BlockedOut {
        y: e.bufs[y],
        ys,
        bias,
        res: res.map(|(v, _)| v),
        lo,
        hi,
        post,
        native,
    })
}

/// Where and how the native output transform writes (see
/// [`native_out`]).
struct NativeOut {
    /// The result's buffer.
    y: Value,
    /// Floats from one of its planes to the next (padded or `OH·OW`).
    ys: usize,
    /// The residual operand and its plane stride, if the epilogue adds
    /// one.
    res: Option<(Value, usize)>,
    /// The conv's bias (one f32 per output channel), if it has one.
    bias: Option<Value>,
    /// The clamp's bounds (`-inf`, `inf` without one).
    lo: f32,
    hi: f32,
}

/// Smallest tile row the native input transform takes (alone, one
/// thread: a 128 -> 128 conv on 28x28, 7 tiles a row, 0.469-0.478 ms
/// generated, 0.453-0.461 native; 32 -> 128 on 27x27 the same either way;
/// 64 -> 256 on 13x13, 4 tiles, 0.153 generated, 0.157-0.159 native).
const NATIVE_IN_MIN_TILES: usize = 7;

/// Whether the input transform of F(`m`x`m`) with tiling `t` runs on
/// the native AVX-512 kernel (`dnnc_winograd4_in_row`): F(4x4) on tile
/// rows of at least [`NATIVE_IN_MIN_TILES`] tiles.
fn native_rows(t: &Tiling, m: usize) -> bool {
    m == 4 && t.tw >= NATIVE_IN_MIN_TILES && dnnc_runtime::cpu::wino::winograd4_out_row_runs()
}

/// Smallest tile row the native output transform takes: it computes
/// sixteen tiles a vector, so shorter rows waste lanes where the
/// generated code's groups of four do not (alone, one thread: a 32 -> 128
/// conv on 27x27, 7 tiles a row, 0.207-0.219 ms either way; a 64 -> 256
/// conv on 13x13, 4 tiles, 0.196-0.201 generated, 0.222-0.233 native).
const NATIVE_OUT_MIN_TILES: usize = 12;

/// The native AVX-512 output transform (`dnnc_winograd4_out_row`) for an
/// F(4x4) kernel whose epilogue is the conv's bias, optionally a residual
/// Add, and at most one Relu or Clip, written to its only result, on tile
/// rows of at least
/// [`NATIVE_OUT_MIN_TILES`] tiles; `None` for any other (the generated
/// transform runs).
fn native_out(
    e: &Emit<'_>,
    c: &KCtx<'_>,
    geo: &ConvGeom,
    t: &Tiling,
    m: usize,
) -> Result<Option<NativeOut>, String> {
    let g = c.g;
    let node = g.node(c.k.nodes[0]);
    // The epilogue as the GEMM fuses it (bias, residual Add, Relu/Clip),
    // or the conv alone; no activation after the clamp.
    let fused = super::contraction::match_fused(c, node.inputs.get(2).copied()).or_else(|| {
        (c.k.nodes.len() == 1).then_some(super::contraction::FusedEp {
            bias: None,
            res: None,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            act: pgemm::ACT_NONE,
        })
    });
    let Some(fused) = fused.filter(|f| f.act == pgemm::ACT_NONE) else {
        return Ok(None);
    };
    let (res, lo, hi) = (fused.res, fused.lo, fused.hi);
    let out =
        *c.k.nodes
            .last()
            .and_then(|&n| g.node(n).outputs.first())
            .ok_or("no result")?;
    let bias_fits = node.inputs.get(2).is_none_or(|&b| {
        let ty = &g.value(b).ty;
        ty.dtype == DType::F32 && ty.shape == [geo.m]
    });
    let fits = m == 4
        && t.tw >= NATIVE_OUT_MIN_TILES
        && dnnc_runtime::cpu::wino::winograd4_out_row_runs()
        && c.k.outputs == [out]
        && g.value(out).ty.dtype == DType::F32
        && bias_fits;
    if !fits {
        return Ok(None);
    }
    let bias = match node.inputs.get(2) {
        Some(&b) => Some(e.bufs[c.arg(b)?]),
        None => None,
    };
    let res = match res {
        Some(r) => Some((e.bufs[c.arg(r)?], c.plane_stride(r))),
        None => None,
    };
    Ok(Some(NativeOut {
        y: e.bufs[c.arg(out)?],
        ys: c.plane_stride(out),
        res,
        bias,
        lo,
        hi,
    }))
}

/// What the three steps of one Winograd kernel share.
struct Wino<'a> {
    /// The algorithm's matrices.
    wn: &'static Winograd,
    /// The convolution.
    geo: &'a ConvGeom,
    /// Its tile grid and buffer layout.
    t: &'a Tiling,
    /// The input tensor.
    x: Value,
    /// Floats from one of its planes to the next (padded or `H·W`).
    xs: usize,
    /// The output transform on the native AVX-512 kernel, where it runs
    /// ([`native_out`]).
    native: Option<NativeOut>,
    /// The input transform on the native AVX-512 kernel
    /// ([`native_rows`]).
    native_in: bool,
    /// The output step of a channel-blocked kernel ([`blocked_out`]);
    /// `None` in the plain layout.
    out8: Option<BlockedOut<'a>>,
    /// Workspace sizes ([`workspaces`]).
    ws: Vec<usize>,
    /// Argument indices of the padded plane, V, M and the staging plane.
    args: [usize; 4],
    /// Argument index of the transformed filters.
    u: usize,
    /// The fused epilogue, reading the staging plane (the plain layout's).
    spec: Option<&'a elementwise::EwSpec<'a>>,
}

impl Wino<'_> {
    /// Input channels `[lo, hi)` of one group (channel `cbase + ci` of
    /// `x` for `ci` in the range; channel blocks, when blocked) of V's
    /// image `img` (0 unless the images share their GEMMs), tile rows
    /// `[r0, r0 + rows)` (one band, or all of them): the padded copy of
    /// the rows those tiles read into plane `xp` (a block's eight planes
    /// from `xp` on, when blocked), then `V[s][ci][img * ps + tile]` for
    /// every tile of the band (band-relative), four tiles of a row a step.
    fn input(
        &self,
        e: &mut Emit<'_>,
        xp: Value,
        (cbase, img): (Value, Value),
        (lo, hi): (Value, Value),
        (r0, rows): (Value, Value),
    ) {
        let (geo, t) = (self.geo, self.t);
        let m = self.wn.m;
        let xw = t.xw;
        let vimg = e.b.ins().imul_imm_s(img, t.p as i64);
        let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
        let x = self.x;
        // Plane row `j` holds input row `r0 * m - pt + j`: rows `[0, jlo)`
        // and `[jhi, hp)` lie outside the input and are zero.
        let hp = e.ci(t.hp as i64);
        let zero = e.ci(0);
        let top = e.b.ins().imul_imm_s(r0, m as i64);
        let ptc = e.ci(pt as i64);
        let jlo = e.b.ins().isub(ptc, top);
        let jlo = e.b.ins().smax(jlo, zero);
        let jlo = e.b.ins().smin(jlo, hp);
        let bottom = e.ci((geo.h + pt) as i64);
        let jhi = e.b.ins().isub(bottom, top);
        let jhi = e.b.ins().smax(jhi, jlo);
        let jhi = e.b.ins().smin(jhi, hp);
        // The zero rows and columns of the plane at float `p0` of `xp`,
        // around its copied rows `[jlo, jhi)`.
        let borders = |e: &mut Emit<'_>, p0: Value| {
            let zero = e.ci(0);
            e.for_range(zero, jlo, 1, |e, j| {
                let d = e.b.ins().imul_imm_s(j, xw as i64);
                let d = e.b.ins().iadd(d, p0);
                zero_run(e, xp, d, xw);
            });
            e.for_range(jlo, jhi, 1, |e, j| {
                let d = e.b.ins().imul_imm_s(j, xw as i64);
                let d = e.b.ins().iadd(d, p0);
                zero_run(e, xp, d, pl);
                let d1 = e.b.ins().iadd_imm_s(d, (pl + geo.w) as i64);
                zero_run(e, xp, d1, xw - pl - geo.w);
            });
            e.for_range(jhi, hp, 1, |e, j| {
                let d = e.b.ins().imul_imm_s(j, xw as i64);
                let d = e.b.ins().iadd(d, p0);
                zero_run(e, xp, d, xw);
            });
        };
        // Input row of plane row `jlo`.
        let ih0 = e.b.ins().iadd(top, jlo);
        let ih0 = e.b.ins().iadd_imm_s(ih0, -(pt as i64));
        e.for_range(lo, hi, 1, |e, ci| {
            let sc = e.b.ins().iadd(cbase, ci);
            let src = e.b.ins().imul_imm_s(sc, self.xs as i64);
            if self.out8.is_some() {
                // Block `sc`'s rows spread over its eight planes at once.
                let plane = t.hp * xw;
                let zero = e.ci(0);
                let all = e.ci(B as i64);
                e.for_range(zero, all, 1, |e, l| {
                    let p0 = e.b.ins().imul_imm_s(l, plane as i64);
                    borders(e, p0);
                });
                let so = e.b.ins().imul_imm_s(ih0, (geo.w * B) as i64);
                let so = e.b.ins().iadd(src, so);
                let sp = e.addr(x, so, 4);
                let d0 = e.b.ins().imul_imm_s(jlo, xw as i64);
                let d0 = e.b.ins().iadd_imm_s(d0, pl as i64);
                let dp = e.addr(xp, d0, 4);
                let nrows = e.b.ins().isub(jhi, jlo);
                let f = e.unblock;
                let args = [
                    sp,
                    e.ci(geo.w as i64),
                    nrows,
                    e.ci(geo.w as i64),
                    dp,
                    e.ci(plane as i64),
                    e.ci(xw as i64),
                ];
                let call = e.b.ins().call(f, &args);
                let rc = e.b.inst_results(call)[0];
                let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
                e.fail_if(bad, 1);
                e.for_range(zero, all, 1, |e, l| {
                    let p0 = e.b.ins().imul_imm_s(l, (plane * 4) as i64);
                    let pp = e.b.ins().iadd(xp, p0);
                    let ch = e.b.ins().imul_imm_s(ci, B as i64);
                    let ch = e.b.ins().iadd(ch, l);
                    self.transform_plane(e, pp, ch, vimg, rows);
                });
                return;
            }
            let zero = e.ci(0);
            borders(e, zero);
            e.for_range(jlo, jhi, 1, |e, j| {
                let d = e.b.ins().imul_imm_s(j, xw as i64);
                let ih = e.b.ins().iadd(top, j);
                let ih = e.b.ins().iadd_imm_s(ih, -(pt as i64));
                let so = e.b.ins().imul_imm_s(ih, geo.w as i64);
                let so = e.b.ins().iadd(src, so);
                let d0 = e.b.ins().iadd_imm_s(d, pl as i64);
                copy_run(e, xp, d0, x, so, geo.w, 1, geo.w);
            });
            self.transform_plane(e, xp, ci, vimg, rows);
        });
    }

    /// `V[s][ci][vimg + tile]` for the tiles of `rows` tile rows of the
    /// padded plane at `xp` (input channel `ci` of the group).
    fn transform_plane(&self, e: &mut Emit<'_>, xp: Value, ci: Value, vimg: Value, rows: Value) {
        let (wn, geo, t) = (self.wn, self.geo, self.t);
        let (m, al) = (wn.m, wn.alpha);
        let (cg, _) = geo.per_group();
        let (xw, ps) = (t.xw, t.rs);
        let vs = block_stride(cg, ps);
        let vb = e.bufs[self.args[1]];
        let vc = e.b.ins().imul_imm_s(ci, ps as i64);
        let vc = e.b.ins().iadd(vc, vimg);
        let zero = e.ci(0);
        e.for_range(zero, rows, 1, |e, r| {
            // Byte addresses of the row's first tile in the plane and V.
            let xr = e.b.ins().imul_imm_s(r, (m * xw * 4) as i64);
            let xr = e.b.ins().iadd(xp, xr);
            let vr = e.b.ins().imul_imm_s(r, t.tw as i64);
            let vr = e.b.ins().iadd(vr, vc);
            let vr = e.addr(vb, vr, 4);
            if self.native_in {
                let f = e.wino4_in;
                let args = [xr, e.ci(xw as i64), e.ci(t.tw as i64), vr, e.ci(vs as i64)];
                let call = e.b.ins().call(f, &args);
                let rc = e.b.inst_results(call)[0];
                let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
                e.fail_if(bad, 1);
                return;
            }
            e.for_n(t.tw4 / 4, |e, q| {
                let xo = e.b.ins().imul_imm_s(q, (4 * m * 4) as i64);
                let ga = e.b.ins().iadd(xr, xo);
                let vo = e.b.ins().imul_imm_s(q, 16);
                let gv = e.b.ins().iadd(vr, vo);
                let v = input_group(e, wn, ga, xw);
                for (i, row) in v.iter().enumerate() {
                    for (j, &y) in row.iter().enumerate() {
                        let off = ((i * al + j) * vs * 4) as i64;
                        let a = e.b.ins().iadd_imm_s(gv, off);
                        e.b.ins().store(mem(), y, a, 0);
                    }
                }
            });
        });
    }

    /// One GEMM per frequency point, `M_s = U_s V_s` with group `gi`'s
    /// filters over `cols` columns of V (every image's tiles, one
    /// image's, or one band's), as one batch (the runtime splits it by
    /// whole GEMMs).
    fn gemm(&self, e: &mut Emit<'_>, gi: Value, cols: Value) {
        let (al, t) = (self.wn.alpha, self.t);
        let (cg, mg) = self.geo.per_group();
        let ustride = packed_stride_in(u_layout(self.geo, self.wn.m), mg, cg) as i64;
        let ug = e.b.ins().imul_imm_s(gi, al as i64 * al as i64 * ustride);
        let ub = e.bufs[self.u];
        let ua = at(e, ub, ug);
        let args = [
            ua,
            e.ci(ustride),
            e.ci(mg as i64),
            cols,
            e.ci(cg as i64),
            e.bufs[self.args[1]],
            e.ci(block_stride(cg, t.rs) as i64),
            e.ci(t.rs as i64),
            e.ci(1),
            e.bufs[self.args[2]],
            e.ci(block_stride(mg, t.rs) as i64),
            e.ci(t.rs as i64),
            e.ci(1),
            e.ci((al * al) as i64),
        ];
        let f = e.bsgemm;
        let call = e.b.ins().call(f, &args);
        let rc = e.b.inst_results(call)[0];
        let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
        e.fail_if(bad, 1);
    }

    /// Output channels `co0 + [lo, hi)` of image `n`, tile rows `[r0,
    /// r0 + rows)` (one band, or all of them; M holds the band's tiles
    /// from its column 0): `Y = Aᵀ M A`, then the epilogue, one channel
    /// at a time. Groups of four tiles that lie wholly inside the output
    /// get the epilogue in registers and are stored straight to the
    /// kernel's outputs ([`super::direct::Epilogue`]); edge groups (past
    /// `W'` or `H'`) go to the staging plane (the argument `args[3]`
    /// points at; it holds the band's rows), and the epilogue runs over
    /// just the edge strips of it, a tile row at a time. Without an
    /// epilogue the registers can evaluate, every group is staged and the
    /// epilogue runs over every row. (Staging every group cost a store, a
    /// reload and a loop over each plane: ~15 µs of SqueezeNet's fire3
    /// 3x3 conv, ~50 µs of ResNet-18's 56x56 ones.)
    fn output(
        &self,
        e: &mut Emit<'_>,
        n: Value,
        co0: Value,
        (lo, hi): (Value, Value),
        (r0, rows): (Value, Value),
    ) -> Result<(), String> {
        if let Some(o) = &self.out8 {
            return self.output_blocked(e, n, (lo, hi), (r0, rows), o);
        }
        let spec = self
            .spec
            .ok_or("a plain Winograd kernel without its epilogue")?;
        let (wn, geo, t) = (self.wn, self.geo, self.t);
        let m = wn.m;
        let (zw, ps) = (t.zw, t.rs);
        let mimg = self.image_columns(e, n);
        if let Some(nat) = &self.native {
            // A call per channel and tile row: its four output rows,
            // bias and clamp applied, edges masked (no staging).
            let r1 = e.b.ins().iadd(r0, rows);
            e.for_range(lo, hi, 1, |e, mo| {
                let co = e.b.ins().iadd(co0, mo);
                let mc = e.b.ins().imul_imm_s(mo, ps as i64);
                let mc = e.b.ins().iadd(mc, mimg);
                let bias = match nat.bias {
                    Some(b) => e.load_f32(b, co),
                    None => e.cf(0.0),
                };
                let plane = e.b.ins().imul_imm_s(n, geo.m as i64);
                let plane = e.b.ins().iadd(plane, co);
                let yo = e.b.ins().imul_imm_s(plane, nat.ys as i64);
                let ro = nat
                    .res
                    .map(|(r, rs)| (r, e.b.ins().imul_imm_s(plane, rs as i64)));
                e.for_range(r0, r1, 1, |e, r| {
                    let yr = e.b.ins().imul_imm_s(r, (m * geo.ow) as i64);
                    let yr = e.b.ins().iadd(yr, yo);
                    let yp = e.addr(nat.y, yr, 4);
                    let rp = match ro {
                        Some((rb, ro)) => {
                            let rr = e.b.ins().imul_imm_s(r, (m * geo.ow) as i64);
                            let rr = e.b.ins().iadd(rr, ro);
                            e.addr(rb, rr, 4)
                        }
                        None => e.ci(0),
                    };
                    self.native_row(e, mc, (r, r0), (yp, rp), (bias, nat.lo, nat.hi));
                });
            });
            return Ok(());
        }
        // The staging plane holds rows from the band's first on; `zp`
        // is where its row 0 would be, so absolute rows index it.
        let zb = e.bufs[self.args[3]];
        let ztop = e.b.ins().imul_imm_s(r0, (m * zw * 4) as i64);
        let zp = e.b.ins().isub(zb, ztop);
        let epi = super::direct::Epilogue::new(spec, true);
        // Tile rows and groups wholly inside the output (fused), with
        // `epi`; the rest are staged.
        let (th_in, q_in) = match epi {
            Some(_) => (geo.oh / m, geo.ow / (4 * m)),
            None => (0, 0),
        };
        let th_full = geo.oh / m;
        let groups = t.tw4 / 4;
        let r1 = e.b.ins().iadd(r0, rows);
        let clamp = |e: &mut Emit<'_>, v: usize| {
            let c = e.ci(v as i64);
            let lo = e.b.ins().smax(c, r0);
            e.b.ins().smin(lo, r1)
        };
        let fused_end = clamp(e, th_in);
        let full_end = clamp(e, th_full);
        let mut err = None;
        e.for_range(lo, hi, 1, |e, mo| {
            let co = e.b.ins().iadd(co0, mo);
            let mc = e.b.ins().imul_imm_s(mo, ps as i64);
            let mc = e.b.ins().iadd(mc, mimg);
            let eplane = epi.as_ref().map(|f| f.plane(e, n, co));
            let transform =
                |e: &mut Emit<'_>, r: Value, q: Value| self.transform_group(e, mc, (r, r0), q);
            let staged = |e: &mut Emit<'_>, r: Value, q: Value| {
                self.stage_group(e, mc, (r, r0), q, (zp, zw));
            };
            // Groups `[from, groups)` of tile row `r`: the one or two edge
            // groups unrolled, whole rows as a loop.
            let staged_groups = |e: &mut Emit<'_>, r: Value, from: usize| {
                if groups - from > 2 {
                    let q0 = e.ci(from as i64);
                    let q1 = e.ci(groups as i64);
                    e.for_range(q0, q1, 1, |e, q| staged(e, r, q));
                } else {
                    for q in from..groups {
                        let q = e.ci(q as i64);
                        staged(e, r, q);
                    }
                }
            };
            if let (Some(f), Some(p)) = (&epi, &eplane) {
                e.for_range(r0, fused_end, 1, |e, r| {
                    let h0 = e.b.ins().imul_imm_s(r, m as i64);
                    let eprows: Vec<_> = (0..m)
                        .map(|i| {
                            let h = e.b.ins().iadd_imm_s(h0, i as i64);
                            f.row(e, p, h)
                        })
                        .collect();
                    e.for_n(q_in, |e, q| {
                        let rows = transform(e, r, q);
                        let qb = e.b.ins().imul_imm_s(q, (4 * m * 4) as i64);
                        for (i, vs) in rows.iter().enumerate() {
                            for (l, &v) in vs.iter().enumerate() {
                                if let Err(msg) =
                                    f.apply(e, &eprows[i], v, qb, (l * 16) as i32, false)
                                {
                                    err.get_or_insert(msg);
                                }
                            }
                        }
                    });
                    staged_groups(e, r, q_in);
                });
            }
            // Tile rows past the fused ones: every group staged.
            e.for_range(fused_end, r1, 1, |e, r| staged_groups(e, r, 0));
            // The epilogue over what was staged, a tile row at a time:
            // the right strip beside the fused rows, then whole rows.
            e.bufs[self.args[3]] = zp;
            let w_in = q_in * 4 * m;
            let mut strip = |e: &mut Emit<'_>, h0: Value, w0: usize, hl: usize, wl: usize| {
                let w0 = e.ci(w0 as i64);
                let sub = SubDomain {
                    starts: vec![Some(n), Some(co), Some(h0), Some(w0)],
                    lens: vec![1, 1, hl, wl],
                };
                if let Err(m) = elementwise::emit(e, spec, &sub) {
                    err.get_or_insert(m);
                }
            };
            if th_in > 0 && w_in < geo.ow {
                e.for_range(r0, fused_end, 1, |e, r| {
                    let h0 = e.b.ins().imul_imm_s(r, m as i64);
                    strip(e, h0, w_in, m, geo.ow - w_in);
                });
            }
            if th_in < th_full {
                e.for_range(fused_end, full_end, 1, |e, r| {
                    let h0 = e.b.ins().imul_imm_s(r, m as i64);
                    strip(e, h0, 0, m, geo.ow);
                });
            }
            if th_full * m < geo.oh {
                // The partial last tile row, in the band that has it.
                e.for_range(full_end, r1, 1, |e, _| {
                    let h0 = e.ci((th_full * m) as i64);
                    strip(e, h0, 0, geo.oh - th_full * m, geo.ow);
                });
            }
            e.bufs[self.args[3]] = zb;
        });
        err.map_or(Ok(()), Err)
    }

    /// Image `n`'s first column of M when the images share their GEMMs,
    /// else 0.
    fn image_columns(&self, e: &mut Emit<'_>, n: Value) -> Value {
        if self.t.imgs > 1 {
            e.b.ins().imul_imm_s(n, self.t.p as i64)
        } else {
            e.ci(0)
        }
    }

    /// The transformed rows of group `q` of tile row `r` (M holds the
    /// band's tile rows from `r0` on) of the output channel whose
    /// products start at column `mc` of M: `Y = Aᵀ M A`, as
    /// pixel-contiguous vectors per output row.
    fn transform_group(
        &self,
        e: &mut Emit<'_>,
        mc: Value,
        (r, r0): (Value, Value),
        q: Value,
    ) -> Vec<Vec<Value>> {
        let (wn, t) = (self.wn, self.t);
        let (m, al) = (wn.m, wn.alpha);
        let ms = block_stride(self.geo.per_group().1, t.rs);
        let mb = e.bufs[self.args[2]];
        let rb = e.b.ins().isub(r, r0);
        let mr = e.b.ins().imul_imm_s(rb, t.tw as i64);
        let mr = e.b.ins().iadd(mr, mc);
        let mr = e.addr(mb, mr, 4);
        let mo4 = e.b.ins().imul_imm_s(q, 16);
        let ma = e.b.ins().iadd(mr, mo4);
        // tr[i][jj] = sum_k Aᵀ[i][k] M[k][jj].
        let mut tr: Vec<Vec<Value>> = vec![Vec::with_capacity(al); m];
        for jj in 0..al {
            let mk: Vec<Value> = (0..al)
                .map(|k| {
                    let off = ((k * al + jj) * ms * 4) as i64;
                    let a = e.b.ins().iadd_imm_s(ma, off);
                    e.b.ins().load(F32X4, mem(), a, 0)
                })
                .collect();
            for (i, y) in at_apply(e, wn, &mk).into_iter().enumerate() {
                tr[i].push(y);
            }
        }
        tr.iter()
            .map(|row| {
                let y = at_apply(e, wn, row);
                out_row_vectors(e, &y)
            })
            .collect()
    }

    /// Group `q` of tile row `r`, transformed ([`Self::transform_group`])
    /// and stored to a staging plane: `zp` is where its output row 0
    /// would be, rows `zrs` floats apart.
    fn stage_group(
        &self,
        e: &mut Emit<'_>,
        mc: Value,
        (r, r0): (Value, Value),
        q: Value,
        (zp, zrs): (Value, usize),
    ) {
        let m = self.wn.m;
        let rows = self.transform_group(e, mc, (r, r0), q);
        let zr = e.b.ins().imul_imm_s(r, (m * zrs * 4) as i64);
        let zo = e.b.ins().imul_imm_s(q, (4 * m * 4) as i64);
        let gz = e.b.ins().iadd(zr, zo);
        let gz = e.b.ins().iadd(zp, gz);
        for (i, vs) in rows.iter().enumerate() {
            for (l, &v) in vs.iter().enumerate() {
                let off = (i * zrs * 4 + l * 16) as i32;
                e.b.ins().store(mem(), v, gz, off);
            }
        }
    }

    /// Tile row `r` (M from the band's row `r0` on) of the output
    /// channel whose products start at column `mc` of M, on the native
    /// F(4x4) output transform: its up to four output rows at `yp`
    /// (`OW` floats apart), `min(max(y + bias + res, lo), hi)` with the
    /// residual rows at `rp` (none when 0).
    fn native_row(
        &self,
        e: &mut Emit<'_>,
        mc: Value,
        (r, r0): (Value, Value),
        (yp, rp): (Value, Value),
        (bias, lo, hi): (Value, f32, f32),
    ) {
        let (geo, t, m) = (self.geo, self.t, self.wn.m);
        let ms = block_stride(geo.per_group().1, t.rs);
        let mb = e.bufs[self.args[2]];
        let rb = e.b.ins().isub(r, r0);
        let mr = e.b.ins().imul_imm_s(rb, t.tw as i64);
        let mr = e.b.ins().iadd(mr, mc);
        let mp = e.addr(mb, mr, 4);
        let left = e.ci(geo.oh as i64);
        let top = e.b.ins().imul_imm_s(r, m as i64);
        let left = e.b.ins().isub(left, top);
        let four = e.ci(m as i64);
        let nrows = e.b.ins().smin(left, four);
        let f = e.wino4_out;
        let args = [
            mp,
            e.ci(ms as i64),
            e.ci(t.tw as i64),
            yp,
            e.ci(geo.ow as i64),
            nrows,
            rp,
            bias,
            e.cf(lo),
            e.cf(hi),
        ];
        let call = e.b.ins().call(f, &args);
        let rc = e.b.inst_results(call)[0];
        let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
        e.fail_if(bad, 1);
    }

    /// Output channel blocks `[lo, hi)` of image `n`, tile rows
    /// `[r0, r0 + rows)` of a channel-blocked kernel: each of a block's eight
    /// channels transformed into its staging plane (the native F(4x4)
    /// rows with the channel's bias, or the generated groups), then the
    /// block's output rows written from the eight planes
    /// (`dnnc_block_rows`: bias where not yet added, residual, clamp),
    /// then any further fused ops on each of those rows.
    fn output_blocked(
        &self,
        e: &mut Emit<'_>,
        n: Value,
        (lo, hi): (Value, Value),
        (r0, rows): (Value, Value),
        o: &BlockedOut<'_>,
    ) -> Result<(), String> {
        let (geo, t, m) = (self.geo, self.t, self.wn.m);
        let ps = t.rs;
        let mimg = self.image_columns(e, n);
        // Each staging plane holds the band's rows, `zrs` floats apart:
        // the native transform writes rows of `OW`.
        let zrs = if o.native { geo.ow } else { t.zw };
        let zplane = t.bt * m * t.zw;
        let zb = e.bufs[self.args[3]];
        let ztop = e.b.ins().imul_imm_s(r0, (m * zrs * 4) as i64);
        let zp0 = e.b.ins().isub(zb, ztop);
        let r1 = e.b.ins().iadd(r0, rows);
        let groups = t.tw4 / 4;
        let mut err = None;
        e.for_range(lo, hi, 1, |e, blk| {
            let plane = e.b.ins().imul_imm_s(n, (geo.m / B) as i64);
            let plane = e.b.ins().iadd(plane, blk);
            let yblk = e.b.ins().imul_imm_s(plane, o.ys as i64);
            // A tile row at a time: its eight channels' output rows
            // staged (a few KB, in L1), then written blocked.
            e.for_range(r0, r1, 1, |e, r| {
                let zero = e.ci(0);
                let all = e.ci(B as i64);
                e.for_range(zero, all, 1, |e, l| {
                    let mo = e.b.ins().imul_imm_s(blk, B as i64);
                    let mo = e.b.ins().iadd(mo, l);
                    let mc = e.b.ins().imul_imm_s(mo, ps as i64);
                    let mc = e.b.ins().iadd(mc, mimg);
                    let zl = e.b.ins().imul_imm_s(l, (zplane * 4) as i64);
                    let zp = e.b.ins().iadd(zp0, zl);
                    if o.native {
                        let bias = match o.bias {
                            Some(b) => e.load_f32(b, mo),
                            None => e.cf(0.0),
                        };
                        let zr = e.b.ins().imul_imm_s(r, (m * zrs * 4) as i64);
                        let yp = e.b.ins().iadd(zp, zr);
                        let none = e.ci(0);
                        let inf = (f32::NEG_INFINITY, f32::INFINITY);
                        self.native_row(e, mc, (r, r0), (yp, none), (bias, inf.0, inf.1));
                    } else {
                        e.for_n(groups, |e, q| {
                            self.stage_group(e, mc, (r, r0), q, (zp, zrs));
                        });
                    }
                });
                // Output rows `[oy0, oy1)`: the tile row's, cut at `OH`.
                let oy0 = e.b.ins().imul_imm_s(r, m as i64);
                let oy1 = e.b.ins().iadd_imm_s(oy0, m as i64);
                let oh = e.ci(geo.oh as i64);
                let oy1 = e.b.ins().smin(oy1, oh);
                let nrows = e.b.ins().isub(oy1, oy0);
                let ro = e.b.ins().imul_imm_s(oy0, (geo.ow * B) as i64);
                let yo = e.b.ins().iadd(yblk, ro);
                let yp = e.addr(o.y, yo, 4);
                let rp = match o.res {
                    Some(rv) => e.addr(rv, yo, 4),
                    None => e.ci(0),
                };
                let bp = match (o.bias, o.native) {
                    (Some(b), false) => {
                        let bo = e.b.ins().imul_imm_s(blk, B as i64);
                        e.addr(b, bo, 4)
                    }
                    _ => e.ci(0),
                };
                // The tile row's staged rows.
                let zr = e.b.ins().imul_imm_s(oy0, (zrs * 4) as i64);
                let zp = e.b.ins().iadd(zp0, zr);
                let f = e.block_rows;
                let args = [
                    zp,
                    e.ci(zplane as i64),
                    e.ci(zrs as i64),
                    nrows,
                    e.ci(geo.ow as i64),
                    yp,
                    e.ci(geo.ow as i64),
                    bp,
                    rp,
                    e.cf(o.lo),
                    e.cf(o.hi),
                ];
                let call = e.b.ins().call(f, &args);
                let rc = e.b.inst_results(call)[0];
                let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
                e.fail_if(bad, 1);
                if let Some(spec) = &o.post {
                    e.for_range(oy0, oy1, 1, |e, oy| {
                        let sub = SubDomain {
                            starts: vec![Some(n), Some(blk), Some(oy), None, None],
                            lens: vec![1, 1, 1, geo.ow, B],
                        };
                        if let Err(m) = elementwise::emit(e, spec, &sub) {
                            err.get_or_insert(m);
                        }
                    });
                }
            });
        });
        err.map_or(Ok(()), Err)
    }
}

/// Lowers a stride-1 convolution as FFTs: per (image, group) one call of
/// the native helper (through its address: it lives in this process, like
/// `dnnc_sgemm`), then the group's epilogue on `y`.
pub(crate) fn lower_fft(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geo: &ConvGeom,
    y: Value,
    spec: Option<&elementwise::EwSpec<'_>>,
) -> Result<Vec<String>, String> {
    let node = c.g.node(c.k.nodes[0]);
    if c.prep.len() < 2 || c.ws.is_empty() {
        return Err("missing FFT buffers".into());
    }
    let (desc, fspec, ws) = (e.bufs[c.prep[0]], e.bufs[c.prep[1]], e.bufs[c.ws[0]]);
    let x = e.bufs[c.arg(node.inputs[0])?];
    let (cg, mg) = geo.per_group();
    let (hf, wf) = geo.fft_grid();
    let ptr = e.cfg.pointer_type();
    let mut sig = Signature::new(e.cfg.default_call_conv);
    for _ in 0..5 {
        sig.params.push(AbiParam::new(ptr));
    }
    sig.returns.push(AbiParam::new(I32));
    let sig = e.b.import_signature(sig);
    let helper = fftconv::dnnc_fft_conv as *const u8 as usize as i64;
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.g, |e, gi| {
            let t0 = e.b.ins().imul_imm_s(n, geo.c as i64);
            let t1 = e.b.ins().imul_imm_s(gi, cg as i64);
            let xc = e.b.ins().iadd(t0, t1);
            let xo = e.b.ins().imul_imm_s(xc, (geo.h * geo.w) as i64);
            let xg = at(e, x, xo);
            let so =
                e.b.ins()
                    .imul_imm_s(gi, (mg * cg * fftconv::plane_len(hf, wf) * 2) as i64);
            let sg = at(e, fspec, so);
            let t0 = e.b.ins().imul_imm_s(n, geo.m as i64);
            let m0 = e.b.ins().imul_imm_s(gi, mg as i64);
            let yc = e.b.ins().iadd(t0, m0);
            let yo = e.b.ins().imul_imm_s(yc, (geo.oh * geo.ow) as i64);
            let yg = at(e, y, yo);
            let f = e.b.ins().iconst(I64, helper);
            let call = e.b.ins().call_indirect(sig, f, &[desc, xg, sg, yg, ws]);
            let rc = e.b.inst_results(call)[0];
            let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
            e.fail_if(bad, 1);
            if let Err(m) = tile_epilogue(e, spec, n, m0, mg) {
                err.get_or_insert(m);
            }
        });
    });
    err.map_or(
        Ok(vec!["FFT convolution failed (transform error)".into()]),
        Err,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1-D check of every table: `Aᵀ[(G g) ⊙ (Bᵀ d)]` is the correlation.
    #[test]
    fn winograd_tables_compute_correlations() {
        for w in WINOGRAD {
            let a = w.alpha;
            assert_eq!(a, w.m + 2);
            let d: Vec<f64> = (0..a).map(|i| (i as f64 * 1.7).sin() + 0.3).collect();
            let g = [0.5, -1.25, 2.0];
            let u: Vec<f64> = (0..a)
                .map(|i| (0..3).map(|k| w.g[i][k] * g[k]).sum())
                .collect();
            let v: Vec<f64> = (0..a)
                .map(|i| (0..a).map(|k| w.bt[i][k] * d[k]).sum())
                .collect();
            for i in 0..w.m {
                let y: f64 = (0..a).map(|k| w.at[i][k] * u[k] * v[k]).sum();
                let want: f64 = (0..3).map(|k| d[i + k] * g[k]).sum();
                assert!((y - want).abs() < 1e-9, "F({}): {y} vs {want}", w.m);
            }
        }
    }
}
