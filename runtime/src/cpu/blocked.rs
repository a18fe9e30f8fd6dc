//! The pointwise (1x1) convolution on channel-blocked activations
//! (`data=nchw8c`: `[N, C/8, H, W, 8]`), the GEMM micro-kernel of the
//! blocked layout. With eight channels of a pixel side by side, a tile of
//! pixels reads its input as one contiguous run per channel block (`C/8`
//! runs of `8 x pixels` floats) instead of `C` rows a plane apart, and
//! writes each output block's pixels as one contiguous run: on the AMD
//! EPYC the narrow high-resolution convs of MobileNet-V2 run 10-20%
//! faster than the NCHW panels kernel (see docs/cpu-backend.md,
//! "Channel-blocked chains").
//!
//! The filter is packed at compile time by [`pack_filter`]: output
//! channels in panels of 16 (a last panel of 8), each panel `[k][16]`.
//! On AVX-512 up to four consecutive 16-channel panels run as one tile
//! of 6 to 12 pixels (`avx512_group_tile`), so each broadcast input
//! element feeds up to four FMAs.
//! Each output element is `bias + sum over k in order + residual`, then
//! clamped and activated, the same in every split and tile.

use super::group8::Group8Geom;
use super::pgemm::{activate, Epilogue, ACT_NONE, ACT_SIGMOID, ACT_SILU};

/// The accumulators of an AVX2 tile, `[pixel][8-lane block]`, each
/// starting at the panel's bias (or zero). A macro so every access keeps
/// literal indices in the tile's own body (see [`avx2_tile_n`]).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_accumulators {
    ($t:expr, $nb:ident) => {{
        use std::arch::x86_64::*;
        let z = _mm256_setzero_ps();
        let mut acc = [[z; 3]; 10];
        if !$t.bias.is_null() {
            let b0 = _mm256_loadu_ps($t.bias);
            let b1 = if $nb > 1 {
                _mm256_loadu_ps($t.bias.add(8))
            } else {
                z
            };
            let b2 = if $nb > 2 {
                _mm256_loadu_ps($t.bias.add(16))
            } else {
                z
            };
            let b = [b0, b1, b2];
            acc = [b; 10];
        }
        acc
    }};
}

/// One accumulator of an AVX2 tile stored (pixel `$p`, block `$b`, both
/// literals) through [`store8`].
#[cfg(target_arch = "x86_64")]
macro_rules! tile_out {
    ($t:expr, $acc:ident, $y:expr, $res:expr, ($np:ident, $nb:ident), ($lo:ident, $hi:ident), $p:literal, $b:literal) => {
        if $p < $np && $b < $nb {
            store8(
                $acc[$p][$b],
                $y,
                $res,
                $b * $t.y_stride + $p * 8,
                ($lo, $hi),
            );
        }
    };
}

/// Stores an AVX2 tile's accumulators: residual (`y`'s layout), clamp,
/// activation, each pixel's blocks `t.y_stride` floats apart.
#[cfg(target_arch = "x86_64")]
macro_rules! tile_store {
    ($t:expr, $acc:ident, $y:expr, $res:expr, $np:ident, $nb:ident) => {{
        use std::arch::x86_64::*;
        let (lo, hi) = (_mm256_set1_ps($t.lo), _mm256_set1_ps($t.hi));
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 0, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 0, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 0, 2);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 1, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 1, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 1, 2);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 2, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 2, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 2, 2);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 3, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 3, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 3, 2);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 4, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 4, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 4, 2);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 5, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 5, 1);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 5, 2);
        // Pixels 6 to 9: one-block (8-channel) panels only.
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 6, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 7, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 8, 0);
        tile_out!($t, $acc, $y, $res, ($np, $nb), (lo, hi), 9, 0);
        activate_tile($t, $y, $np, $nb);
    }};
}

/// Calls the monomorphic tile `$f::<NP, NB>` for `$n` pixels of a panel
/// `$width` channels wide (24: three blocks and at most 3 pixels; 16: two
/// blocks and at most 5; 8: one block and at most 10), as
/// [`Path::tile_pixels`] cuts them.
#[cfg(target_arch = "x86_64")]
macro_rules! dispatch_tile {
    ($f:ident, $n:expr, $width:expr, ($($arg:expr),*)) => {
        match ($n, $width) {
            (10, _) => $f::<10, 1>($($arg),*),
            (9, _) => $f::<9, 1>($($arg),*),
            (8, _) => $f::<8, 1>($($arg),*),
            (7, _) => $f::<7, 1>($($arg),*),
            (6, _) => $f::<6, 1>($($arg),*),
            (3, 24) => $f::<3, 3>($($arg),*),
            (2, 24) => $f::<2, 3>($($arg),*),
            (1, 24) => $f::<1, 3>($($arg),*),
            (5, 16) => $f::<5, 2>($($arg),*),
            (5, _) => $f::<5, 1>($($arg),*),
            (4, 16) => $f::<4, 2>($($arg),*),
            (4, _) => $f::<4, 1>($($arg),*),
            (3, 16) => $f::<3, 2>($($arg),*),
            (3, _) => $f::<3, 1>($($arg),*),
            (2, 16) => $f::<2, 2>($($arg),*),
            (2, _) => $f::<2, 1>($($arg),*),
            (_, 16) => $f::<1, 2>($($arg),*),
            (_, _) => $f::<1, 1>($($arg),*),
        }
    };
}

/// A pointwise tile's loop over `$k` input channels: one input block
/// (eight `k`, `$stride` floats apart) per iteration, `$step!(a, kk)` for
/// each of its channels (unrolled, so every broadcast's address is a
/// constant offset from the block's start), the filter pointer `$wp`
/// moving eight rows of `$row` floats.
#[cfg(target_arch = "x86_64")]
macro_rules! k_blocks {
    ($x:expr, $stride:expr, $k:expr, $step:ident, $wp:ident, $row:expr) => {
        for kb in 0..$k / 8 {
            let a = $x.add(kb * $stride);
            $step!(a, 0);
            $step!(a, 1);
            $step!(a, 2);
            $step!(a, 3);
            $step!(a, 4);
            $step!(a, 5);
            $step!(a, 6);
            $step!(a, 7);
            $wp = $wp.add(8 * $row);
        }
    };
}

/// The accumulators of an AVX-512 tile, `[pixel]` zmm (two blocks) and,
/// for a 24-channel panel (`$w24`), `[pixel]` ymm (the third), each
/// starting at the panel's bias (or zero).
#[cfg(target_arch = "x86_64")]
macro_rules! zmm_accumulators {
    ($t:expr, $w24:ident) => {{
        use std::arch::x86_64::*;
        let (b16, b8) = if $t.bias.is_null() {
            (_mm512_setzero_ps(), _mm256_setzero_ps())
        } else if $w24 {
            (_mm512_loadu_ps($t.bias), _mm256_loadu_ps($t.bias.add(16)))
        } else {
            (_mm512_loadu_ps($t.bias), _mm256_setzero_ps())
        };
        ([b16; 14], [b8; 14])
    }};
}

/// One pixel (`$p`, a literal) of an AVX-512 tile stored through
/// [`store8`]: its zmm as two 8-channel halves `t.y_stride` floats apart,
/// then the ymm of a 24-channel panel (`$w24`).
#[cfg(target_arch = "x86_64")]
macro_rules! zmm_out {
    ($t:expr, ($a16:ident, $a8:ident), $y:expr, $res:expr, ($np:ident, $w24:ident), ($lo:ident, $hi:ident), $($p:literal)*) => {$(
        if $p < $np {
            let v = $a16[$p];
            let v0 = _mm512_castps512_ps256(v);
            let v1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            store8(v0, $y, $res, $p * 8, ($lo, $hi));
            store8(v1, $y, $res, $t.y_stride + $p * 8, ($lo, $hi));
            if $w24 {
                store8($a8[$p], $y, $res, 2 * $t.y_stride + $p * 8, ($lo, $hi));
            }
        }
    )*};
}

/// Stores an AVX-512 tile's accumulators ([`zmm_out`] per pixel, literal
/// indices as in every tile).
#[cfg(target_arch = "x86_64")]
macro_rules! zmm_store {
    ($t:expr, $a16:ident, $a8:ident, $y:expr, $res:expr, $np:ident, $w24:ident) => {{
        use std::arch::x86_64::*;
        let (lo, hi) = (_mm256_set1_ps($t.lo), _mm256_set1_ps($t.hi));
        zmm_out!($t, ($a16, $a8), $y, $res, ($np, $w24), (lo, hi), 0 1 2 3 4 5 6 7 8 9 10 11 12 13);
        activate_tile($t, $y, $np, if $w24 { 3 } else { 2 });
    }};
}

/// Output channels per filter panel: two 8-lane blocks, or three where
/// the blocks are odd (a one-block panel would run half as many FMAs per
/// load: MobileNet-V2's 24-channel projections).
pub fn panel_width(m: usize, o: usize) -> usize {
    let blocks = m / 8;
    if o == 0 && blocks % 2 == 1 && blocks >= 3 {
        24
    } else {
        (m - o).min(16)
    }
}

/// How many filter panels a `m`-channel filter packs into.
pub fn panel_count(m: usize) -> usize {
    let mut o = 0;
    let mut n = 0;
    while o < m {
        o += panel_width(m, o);
        n += 1;
    }
    n
}

/// Which tile code a call runs: the widest this machine has, passed down
/// so the tests can run every path on the same data (their results are
/// bitwise equal: each output is bias, then `k` in order by FMA,
/// residual, clamp, activation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    /// One lane at a time.
    Portable,
    /// ymm tiles ([`avx2_tile_n`]).
    Avx2,
    /// zmm tiles ([`avx512_tile_n`]): a 16-channel panel is one register.
    Avx512,
}

impl Path {
    /// The fastest path this machine runs (the AVX-512 tiles need
    /// `avx512vl` too, for their 8-lane EVEX FMAs).
    fn best() -> Path {
        if super::avx512_vl() {
            Path::Avx512
        } else if super::avx2_fma() {
            Path::Avx2
        } else {
            Path::Portable
        }
    }

    /// Pixels per tile of a panel `width` channels wide. ymm: 10
    /// accumulators (5 x 2) or 9 (3 x 3) plus the filter rows and a
    /// broadcast, leaving LLVM spare registers. Tiles of 12 accumulators
    /// needed 15 or all 16 ymm registers, and LLVM kept one accumulator
    /// on the stack, a load, FMA and store in its chain: 4 x 3 ran
    /// 24-channel panels at half speed (45 against 94 GFLOP/s on Zen 3),
    /// and 6 x 2 16-channel ones 1-14% slower than 5 x 2 (`perf` put a
    /// third of the tile's samples at the spill). An 8-channel panel takes
    /// 10 pixels: its accumulators are its only independent FMA chains,
    /// and 5 left a grouped conv's tiles bound by FMA latency (RegNet's
    /// 104 -> 104 3x3 on 28x28 at batch 8, `GROUPED=1 window_blocked`:
    /// 30-38 GFLOP/s, 53-58 with 10 or 12; 12 spilled accumulators).
    /// zmm: 14 x 1 (16 channels) or 8 x (1 + a ymm) of the 32 registers,
    /// so a panel's filter row is read once per 14 pixels, not per 5; an
    /// 8-wide panel keeps the ymm tile. (Consecutive 16-channel panels
    /// run together instead, [`GROUP_TILE_PIXELS`].)
    fn tile_pixels(self, width: usize) -> usize {
        match (self, width) {
            (Path::Avx512, 16) => 14,
            (Path::Avx512, 24) => 8,
            (_, 24) => 3,
            (_, 16) => 5,
            _ => 10,
        }
    }
}

/// The next tile's pixels when `left` remain and tiles hold at most
/// `tile`: the remainder shared out over as many tiles as it takes
/// (49 pixels in tiles of 6: four of 6 and five of 5, not eight and 1;
/// in tiles of 5: nine of 5 and one of 4).
/// A one-pixel tile keeps only its panel's two or three accumulators
/// busy, each a chain of dependent FMAs (latency-bound: about as long as
/// a full tile's pass over `k`); five pixels keep ten chains going.
fn balanced_tile(left: usize, tile: usize) -> usize {
    left.div_ceil(left.div_ceil(tile))
}

/// The tiles [`balanced_tile`] cuts `len` pixels into, in order, with its
/// two divisions done once for the run instead of for every tile: the
/// first `len % count` tiles take one pixel more than the rest. Per tile,
/// the divisions were about 1% of MobileNet-V2's `perf` samples: its
/// short-k tiles (k = 16-32) take only ~100 cycles each.
struct Tiles {
    /// Tiles left to yield.
    left: usize,
    /// Pixels of the smaller tiles.
    base: usize,
    /// How many of the tiles left take `base + 1` pixels.
    longer: usize,
}

impl Tiles {
    fn new(len: usize, tile: usize) -> Tiles {
        let count = len.div_ceil(tile.max(1));
        if count == 0 {
            return Tiles {
                left: 0,
                base: 0,
                longer: 0,
            };
        }
        Tiles {
            left: count,
            base: len / count,
            longer: len % count,
        }
    }
}

impl Tiles {
    /// The tiles as runs of equal ones, `(pixels, count)`: the longer
    /// tiles', then the rest's (a run of none left out).
    fn runs(self) -> impl Iterator<Item = (usize, usize)> {
        [
            (self.base + 1, self.longer),
            (self.base, self.left - self.longer),
        ]
        .into_iter()
        .filter(|&(_, count)| count > 0)
    }
}

impl Iterator for Tiles {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.longer > 0 {
            self.longer -= 1;
            Some(self.base + 1)
        } else {
            Some(self.base)
        }
    }
}

/// How many 16-channel panels from channel `o` of an `m`-channel filter
/// (at most `left` of them, the task's share) one AVX-512 tile takes: up
/// to four, as many as are whole 16-channel panels.
fn group_panels(m: usize, o: usize, left: usize) -> usize {
    ((m - o) / 16).clamp(1, 4).min(left.max(1))
}

/// Pixels per AVX-512 tile of `g` 16-channel panels (index `g`): 24
/// accumulators of the 32 registers, the rest for the `g` filter rows and
/// a broadcast.
const GROUP_TILE_PIXELS: [usize; 5] = [0, 14, 12, 8, 6];

/// Pixel chunks are whole tiles of every ymm width (5 and 3 pixels).
const TILE_LCM: usize = 15;

/// Floats of input a pixel chunk aims to keep in L1 while every filter
/// panel passes over it.
const CHUNK_FLOATS: usize = 4096;

/// Floats of input up to which a call's whole pixel range is one chunk
/// (it stays in L2, and each filter panel is read once): on small maps
/// with wide filters, L1-sized chunks of 12 pixels re-read all of
/// MobileNet-V2's 1280 x 320 filter (1.6 MB) five times per image.
pub const WHOLE_FLOATS: usize = 65536;

/// Input channels a `k` block of the AVX-512 group tiles takes, for a
/// pointwise conv of `k` 384 or more over 128 pixels or more (see
/// `k_step` in the source): four panels' filter rows for it, 32 KiB, stay
/// in L1 while a chunk of pixel tiles passes.
pub const K_BLOCK: usize = 128;

/// Floats of input in a chunk of pixels that the `k` blocks of a
/// [`k_step`] conv go through together (512 pixels at [`K_BLOCK`]): each
/// block's input rows (256 KiB) stay in L2 while every filter group's
/// block passes from L1, so a filter too big for L2 is read once per
/// chunk. In chunks of 128 pixels SqueezeNet's 1000 x 512 classifier
/// (169 pixels, 2 MB of filter) ran 1.05-1.09 ms, against 0.94-1.04 in
/// one chunk and 0.92-1.00 unblocked (alternating profiles).
const K_BLOCK_CHUNK_FLOATS: usize = 65536;

/// How many input channels a group tile of a pointwise conv takes at a
/// time: [`K_BLOCK`] on AVX-512 for `k` of 384 and more over at least 128
/// pixels, unless the residual is the output itself (a later block would
/// read partial sums as the residual); else all `k`. Each tile's
/// accumulators then start from the partial sums its previous block
/// stored, so each output is still the bias, then one FMA per `k` in
/// order: bitwise the unblocked result. Unblocked, a four-panel tile
/// streams `64 x k` filter floats from L2 per 6 pixels; with activations
/// out of cache (`nchwc_pointwise` example, default sweep), 256 x 784 x
/// 1024 ran 1.41 -> 1.02 of the packed GEMM at batch 8 and 512 x 196 x
/// 512 1.21 -> 0.99 at batch 1. On 7x7 maps blocks lost (2048 x 49 x 512
/// at batch 8: 0.96 -> 1.03, 384 x 49 x 832 0.94 -> 0.96), hence the
/// pixel bound; with the activations in cache it is neutral. In models
/// (alternating bench pairs, blocked against not): GoogLeNet, SqueezeNet
/// and MobileNet-V2 within 0.98-1.03 (two identical builds spread
/// 0.97-1.03), ResNet-50 at batch 8 0.978 and 0.994 (its one blocked conv
/// with such a `k`).
fn k_step(path: Path, k: usize, pixels: usize, out: &Out) -> usize {
    if pixels >= 128 && deep_k(path, k, out.res, out.y) {
        K_BLOCK
    } else {
        k
    }
}

/// Whether the AVX-512 group tiles take a contraction of depth `k` in
/// [`K_BLOCK`] blocks: 384 or more, unless the residual `res` is the
/// output `y` itself (a later block would read partial sums as the
/// residual). The one rule of the pointwise ([`k_step`]) and window
/// (`window_k_step`) convs.
fn deep_k(path: Path, k: usize, res: *const f32, y: *const f32) -> bool {
    path == Path::Avx512 && k >= 384 && !residual_is_output(res, y)
}

/// Whether the residual `res` is the output `y` itself: no tile may then
/// go through its `k` in blocks (a later block would read partial sums
/// as the residual).
fn residual_is_output(res: *const f32, y: *const f32) -> bool {
    !res.is_null() && std::ptr::eq(res, y)
}

/// Floats of filter from which a pointwise conv's pixels run as one
/// chunk however many there are (up to [`WHOLE_MAX_FLOATS`] of input):
/// a filter as large as L2 ([`super::l2_bytes`]) does not stay there,
/// and L1-sized chunks read it from L3 once each. SqueezeNet's
/// classifier on the Xeon (1 MiB L2), 1000 x 169 x 512 (2 MB of filter,
/// 346 KB of input), blocked in the model (pools blocked, one thread, 4
/// alternating runs): 1.07-1.18 -> 0.84-0.96 ms, where the plain packed
/// GEMM takes 0.95. On Zen 3 (512 KiB L2) the optimised GoogLeNet's
/// merged inception convs (filters of 0.6-0.9 MB; one thread, 6
/// alternating profiles, the 1 MiB bound against this one): 448 x 196 x
/// 528 1.062 -> 1.007 ms, 296 x 196 x 512 0.677 -> 0.652.
pub fn big_filter_floats() -> usize {
    super::l2_bytes() / 4
}

/// Floats of input up to which a map with a [`big_filter_floats`] filter
/// runs as one chunk: the input then stays in L2 while the filter
/// streams past it once.
pub const WHOLE_MAX_FLOATS: usize = 1 << 18;

/// Whether a pointwise conv's `pixels` (of `k` channels in, `m` out) run
/// as one chunk, each filter panel read once (see [`WHOLE_FLOATS`] and
/// [`big_filter_floats`]); the backend splits such a map by filter panels.
pub fn whole_map(pixels: usize, k: usize, m: usize) -> bool {
    let input = pixels * k;
    input <= WHOLE_FLOATS || (m * k >= big_filter_floats() && input <= WHOLE_MAX_FLOATS)
}

/// The packed filter of a grouped window conv ([`IntoBlockedGeom::groups`]
/// above 1): `w[o * taps + t]` (ONNX's `[m][8][kh][kw]`, `taps` = 8 kh kw)
/// as one panel of 8 output channels per group, `[taps][8]`.
pub fn pack_grouped_filter(w: &[f32], m: usize, taps: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * taps];
    for o0 in (0..m).step_by(8) {
        for t in 0..taps {
            for j in 0..8 {
                out[o0 * taps + t * 8 + j] = w[(o0 + j) * taps + t];
            }
        }
    }
    out
}

/// The packed filter of a `m x k` pointwise conv (`w[o * k + c]`, both
/// multiples of 8): panels of [`panel_width`] output channels, each
/// stored `[k][width]`.
pub fn pack_filter(w: &[f32], m: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0f32; m * k];
    let mut o = 0;
    while o < m {
        let width = panel_width(m, o);
        for kk in 0..k {
            for j in 0..width {
                out[o * k + kk * width + j] = w[(o + j) * k + kk];
            }
        }
        o += width;
    }
    out
}

/// `y = epilogue(w * x)` for the pixels `[q0, q1)` of a batch of
/// `hw`-pixel images flattened in order (pixel `q` is pixel `q % hw` of
/// image `q / hw`) and the filter panels `[n0, n1)` (of
/// [`panel_count`]), `x: [N, k/8, hw, 8]`, `y: [N, m/8, hw, 8]`, `w`
/// packed by [`pack_filter`]. Tasks split a small map by panels (each
/// then reads its share of the filter, and a 7x7 map need not split
/// 3 + 4 rows), a large one by pixels. The epilogue's bias is per output channel and its
/// residual has `y`'s layout (its strides are ignored); no prologue.
/// Returns 0.
///
/// # Safety
/// The pointers must address buffers of those shapes; `y` may be the
/// residual (each element is read before it is written) but must not
/// overlap `x` or `w`; `k` and `m` are positive multiples of 8.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_conv1x1_nchw8c(
    w: *const f32,
    k: usize,
    m: usize,
    x: *const f32,
    y: *mut f32,
    hw: usize,
    q0: usize,
    q1: usize,
    n0: usize,
    n1: usize,
    ep: *const Epilogue,
) -> i32 {
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    let path = Path::best();
    for (img, p0, p1) in image_runs((q0, q1), hw) {
        let out = Out::of_image(y, ep.res, img, (m, hw));
        let kstep = k_step(path, k, p1 - p0, &out);
        let inp = In {
            x: x.add(img * k * hw),
            block: hw * 8,
            origin: 0,
        };
        image(w, k, m, &inp, &out, (p0, p1), (n0, n1), &ep, path, kstep);
    }
    0
}

/// The runs of pixels `[q0, q1)` of a batch of `hw`-pixel images
/// flattened in order (pixel `q` is pixel `q % hw` of image `q / hw`),
/// one per image they reach: `(image, p0, p1)`, pixels `[p0, p1)` of it.
fn image_runs((q0, q1): (usize, usize), hw: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let mut q = q0;
    std::iter::from_fn(move || {
        if q >= q1 || hw == 0 {
            return None;
        }
        let img = q / hw;
        let (p0, p1) = (q % hw, (q1 - img * hw).min(hw));
        q = img * hw + p1;
        Some((img, p0, p1))
    })
}

/// `y = epilogue(w * x)` for the pixels `[p0, p1)` of one image `x:
/// [k/8, hw, 8]`, every filter panel, written to a band of rows: pixel
/// `p` of output block `b` at `y + b * y_block + (p - p0) * 8` (floats),
/// the residual (if `ep` has one) read at the same offset from its
/// pointer. A fused expansion computes the expanded rows a few at a time
/// this way, into a ring of rows that stays in cache, and a fused
/// projection turns one scratch row of depthwise results (`hw` its
/// width) into one row of its output. Returns 0.
///
/// # Safety
/// As for [`dnnc_conv1x1_nchw8c`]; `y` (and the residual) address `m/8`
/// blocks of `p1 - p0` pixels `y_block` floats apart, `y` not
/// overlapping `x` or `w`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_conv1x1_nchw8c_band(
    w: *const f32,
    k: usize,
    m: usize,
    x: *const f32,
    hw: usize,
    p0: usize,
    p1: usize,
    y: *mut f32,
    y_block: usize,
    ep: *const Epilogue,
) -> i32 {
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    let out = Out {
        y,
        res: ep.res,
        block: y_block,
        origin: p0,
    };
    let path = Path::best();
    let kstep = k_step(path, k, p1 - p0, &out);
    let inp = In {
        x,
        block: hw * 8,
        origin: 0,
    };
    image(
        w,
        k,
        m,
        &inp,
        &out,
        (p0, p1),
        (0, usize::MAX),
        &ep,
        path,
        kstep,
    );
    0
}

/// The geometry of a window conv into the blocked layout
/// ([`dnnc_conv_into_nchw8c`]), as the generated code passes it: the
/// window's fields, the output channels, then the input's layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntoBlockedGeom {
    /// Input channels, extents, output extents, window, strides and
    /// leading padding.
    pub conv: Group8Geom,
    /// Output channels: whole blocks of 8.
    pub m: usize,
    /// 1 when the input is channel-blocked too (`[N, C/8, H, W, 8]`, the
    /// dense window convs inside a blocked region), 0 when it is NCHW
    /// (a stem feeding a region, of any channel count).
    pub blocked_input: usize,
    /// Parts the filter's panels are shared into for tasks (at least 1):
    /// the call's units are `slice * N * oh + row`, so a small map (7
    /// rows at batch 1) splits by output channels too, as the pointwise
    /// conv splits one by panels.
    pub slices: usize,
    /// Images in the batch (`N`: a slice's units are its `N * oh` rows).
    pub n: usize,
    /// 1 for a dense conv; `c / 8` for a grouped conv of eight input and
    /// eight output channels per group (RegNet's 3x3 convs, group width
    /// 8), each group one block in and one block out: the input block of
    /// a group is the only one its 8-wide filter panel reads.
    pub groups: usize,
}

impl IntoBlockedGeom {
    /// Whether the conv is grouped (one 8-channel block per group).
    fn grouped(&self) -> bool {
        self.groups > 1
    }

    /// Filter panels: [`panel_count`], or one per group.
    pub fn panels(&self) -> usize {
        if self.grouped() {
            self.groups
        } else {
            panel_count(self.m)
        }
    }

    /// Output channels of the panel from channel `o`: [`panel_width`], or
    /// a group's 8.
    fn panel_width(&self, o: usize) -> usize {
        if self.grouped() {
            8
        } else {
            panel_width(self.m, o)
        }
    }

    /// Taps a panel's filter row sums: every input channel's window, or
    /// its group's 8 channels'.
    fn taps(&self) -> usize {
        let c = if self.grouped() { 8 } else { self.conv.c };
        c * self.conv.kh * self.conv.kw
    }
}

/// Why [`dnnc_conv_into_nchw8c`] does not compute `g`, or `None`.
pub fn into_unfit(g: &IntoBlockedGeom) -> Option<&'static str> {
    let c = &g.conv;
    if g.m == 0 || !g.m.is_multiple_of(8) {
        Some("output channels must be whole blocks of 8")
    } else if c.c == 0 || c.h == 0 || c.w == 0 || c.oh == 0 || c.ow == 0 {
        Some("empty input or output")
    } else if c.sh == 0 || c.sw == 0 || c.kh == 0 || c.kw == 0 {
        Some("strides and filter extents must be positive")
    } else if g.blocked_input > 1 {
        Some("the input layout must be 0 (NCHW) or 1 (blocked)")
    } else if g.blocked_input == 1 && !c.c.is_multiple_of(8) {
        Some("a blocked input has whole blocks of 8 channels")
    } else if g.n == 0 {
        Some("empty batch")
    } else if g.groups == 0 {
        Some("groups must be at least 1")
    } else if g.grouped() && (g.blocked_input != 1 || c.c != g.m || g.groups * 8 != g.m) {
        Some("a grouped conv reads and writes blocks, one block of 8 channels a group")
    } else if g.slices == 0 || g.slices > g.panels() {
        Some("slices must be 1 to the filter's panel count")
    } else {
        None
    }
}

/// Computes units `u0..u1` (unit `slice * N * oh + img * oh + oy`: output
/// row `oy` of image `img`, the channels of the filter panels in part
/// `slice` of `geo.slices`) of the undilated, ungrouped conv `geo` of
/// filter `w` (packed by [`pack_filter`] as an
/// `m x (c kh kw)` matrix) over the input `x` (NCHW, or blocked where
/// `geo.blocked_input` says so) into `y`, blocked (`[N, m/8, oh, ow,
/// 8]`), with `ep`'s bias, residual (`y`'s layout), clamp and activation.
/// Two users: the conv that feeds a blocked chain from a plain input
/// (MobileNet-V2's 3-channel stem) writes the chain's first activation
/// directly instead of in NCHW and then reordered; the dense window convs
/// inside a region (Inception's 1x7, 7x1, 5x5 and stride-2 3x3, any 3x3
/// not run as Winograd) read and write blocks, so the region need not end
/// at them. One tile of pixels of an output row against a panel of filter
/// channels, one broadcast input element per pixel and tap, as
/// [`dnnc_conv1x1_nchw8c`] per input channel; tiles whose window crosses
/// the padding read a zero-padded copy of the rows the windows cover.
/// Returns 0, or 1 for a geometry it does not compute ([`into_unfit`])
/// or units past the last (`slices * N * oh`).
///
/// # Safety
/// `w`, `x`, `y`, `geo` (and `ep`'s pointers) must be valid for the
/// geometry and the images the rows reach; `y` must not overlap `x`.
#[no_mangle]
pub unsafe extern "C" fn dnnc_conv_into_nchw8c(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: *const IntoBlockedGeom,
    u0: usize,
    u1: usize,
    ep: *const Epilogue,
) -> i32 {
    into_blocked(w, x, y, &*geo, (u0, u1), ep, Path::best())
}

/// Columns of one row of a grouped window conv's ring
/// ([`dnnc_conv_group_ring_nchw8c`]): the leading padding, the input
/// row, and zeros to the last column the windows reach.
pub fn group_ring_width(g: &Group8Geom) -> usize {
    copy_width(g).max(g.pl + g.w)
}

/// Floats of a grouped window conv's ring: `[C/8][kh + 1][width][8]`
/// ([`group_ring_width`]), `kh` row slots per channel block and a last
/// one of zeros for the rows in the padding.
pub fn group_ring_floats(g: &Group8Geom) -> usize {
    g.c * (g.kh + 1) * group_ring_width(g)
}

/// Computes output row `u` (`img * oh + oy`) of the grouped window conv
/// `geo` (one block of eight channels a group, a blocked input) from a
/// ring of its input rows instead of the input tensor: the kernel of a
/// grouped conv whose input a fused expansion computes a row at a time
/// (RegNet's 1x1 conv and the 3x3 grouped conv it feeds), so the
/// expanded map never goes to memory. The ring is
/// `[C/8][kh + 1][group_ring_width][8]` ([`group_ring_floats`]): input
/// row `iy` of a block in one of its `kh` slots, its columns from the
/// leading padding on, zeros around them, and slot `kh` all zeros;
/// `slots[ky]` names the slot of the output row's window row `ky` (`kh`
/// for a row in the padding). The tiles, taps and epilogue are
/// [`dnnc_conv_into_nchw8c`]'s on the same rows, so the result is its
/// bits. The descriptor's filter slices are ignored: the call computes
/// every group of the row. Returns 0, or 1 for a geometry it does not
/// compute (not grouped, [`into_unfit`]), a row past the last, or a
/// slot past `kh`.
///
/// # Safety
/// `w` (packed by [`pack_grouped_filter`]), `ring`, `slots` (`kh`
/// entries), `y`, `geo` (and `ep`'s pointers) must be valid for the
/// geometry; `y` must not overlap the ring.
#[no_mangle]
pub unsafe extern "C" fn dnnc_conv_group_ring_nchw8c(
    w: *const f32,
    ring: *const f32,
    slots: *const usize,
    y: *mut f32,
    geo: *const IntoBlockedGeom,
    u: usize,
    ep: *const Epilogue,
) -> i32 {
    group_ring_row(w, ring, slots, y, &*geo, u, ep, Path::best())
}

/// [`dnnc_conv_group_ring_nchw8c`] on `path`.
#[allow(clippy::too_many_arguments)]
unsafe fn group_ring_row(
    w: *const f32,
    ring: *const f32,
    slots: *const usize,
    y: *mut f32,
    geo: &IntoBlockedGeom,
    u: usize,
    ep: *const Epilogue,
    path: Path,
) -> i32 {
    let g = geo.conv;
    if into_unfit(geo).is_some() || !geo.grouped() || u >= geo.n * g.oh {
        return 1;
    }
    let slots = std::slice::from_raw_parts(slots, g.kh);
    if slots.iter().any(|&s| s > g.kh) {
        return 1;
    }
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    let ymm = if path == Path::Avx512 {
        Path::Avx2
    } else {
        path
    };
    let width = group_ring_width(&g);
    // Each tap of a group's block, in filter order `[8][kh][kw]`, in the
    // thread's window scratch (no allocation per row).
    let taps = geo.taps();
    let mut scratch = WINDOW_SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
    let offs = &mut scratch.padded;
    offs.clear();
    offs.extend((0..taps).map(|t| {
        let (ch, ky, kx) = (t / (g.kh * g.kw), t / g.kw % g.kh, t % g.kw);
        ((slots[ky] * width + kx) * 8 + ch) as isize
    }));
    let (img, oy) = (u / g.oh, u % g.oh);
    let plane = g.oh * g.ow;
    let yo = img * geo.m * plane + oy * g.ow * 8;
    let group_rows = g.kw == 3 && g.sw == 1;
    for group in 0..geo.groups {
        let o = group * 8;
        let t = Tile::panel(w, (o, 8), (taps, 0), plane * 8, &ep, ymm);
        let src = ring.add(group * (g.kh + 1) * width * 8);
        let mut p = 0;
        for n in Tiles::new(g.ow, ymm.tile_pixels(8)) {
            let at = yo + group * plane * 8 + p * 8;
            let (yp, rp) = (
                y.add(at),
                if ep.res.is_null() {
                    ep.res
                } else {
                    ep.res.add(at)
                },
            );
            let win = Window {
                src: src.add(p * g.sw * 8),
                offs: offs.as_ptr(),
                ps: (g.sw * 8) as isize,
            };
            match path {
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 | Path::Avx512 if group_rows => avx2_group_row_tile(&t, &win, yp, rp, n),
                #[cfg(target_arch = "x86_64")]
                Path::Avx2 | Path::Avx512 => avx2_window_tile(&t, &win, yp, rp, n),
                _ => portable_window_tile(&t, &win, yp, rp, n),
            }
            p += n;
        }
    }
    WINDOW_SCRATCH.with(|c| *c.borrow_mut() = scratch);
    0
}

/// Pixels of one image that a gathered conv ([`dnnc_conv_gather_nchw8c`])
/// copies into its scratch at a time: the chunk the pointwise tiles
/// would run a pointwise conv of depth `k` over `hw` pixels in (all of
/// them when the map is whole, else whole tiles filling an L1-sized
/// chunk), so every
/// filter panel passes over the gathered pixels as it would over a
/// pointwise conv's input.
pub fn gather_piece_pixels(hw: usize, k: usize, m: usize) -> usize {
    if whole_map(hw, k, m) {
        hw
    } else {
        (CHUNK_FLOATS / k.max(1) / TILE_LCM * TILE_LCM)
            .max(TILE_LCM)
            .min(hw)
    }
}

/// Why [`dnnc_conv_gather_nchw8c`] does not compute `g`, or `None`: a
/// 1x1 conv of what [`dnnc_conv_into_nchw8c`] takes with a blocked
/// input, one group and one filter slice.
pub fn gather_unfit(g: &IntoBlockedGeom) -> Option<&'static str> {
    if let Some(why) = into_unfit(g) {
        Some(why)
    } else if g.blocked_input != 1 {
        Some("a gathered conv reads a blocked input")
    } else if g.groups != 1 || g.slices != 1 {
        Some("a gathered conv has one group and one filter slice")
    } else if g.conv.kh != 1 || g.conv.kw != 1 {
        Some("a gathered conv has a 1x1 filter")
    } else {
        None
    }
}

thread_local! {
    /// A thread's gathered pixels ([`dnnc_conv_gather_nchw8c`]), kept
    /// between calls.
    static GATHER_COLUMNS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Computes output pixels `q0..q1` (pixel `q` is pixel `q % (oh ow)` of
/// image `q / (oh ow)`) of the 1x1 conv `geo` (a strided projection:
/// blocked input, one group) for the filter panels `[n0, n1)`: the input
/// pixels under a piece of output pixels ([`gather_piece_pixels`]) are
/// copied to thread scratch as a dense blocked `[c/8][pixels][8]` map
/// (`gather_columns`) and the pointwise conv's tiles
/// ([`dnnc_conv1x1_nchw8c`]) run over it, `w` packed by [`pack_filter`].
/// Each output sums its products in the order of
/// [`dnnc_conv_into_nchw8c`] (bias, then the input channels in order by
/// FMA), whose bits it gives. The window kernel tiles each output row
/// apart, and a projection's rows are short (7 pixels on ResNet-50's
/// last stage): there its stride-2 1x1 convs at batch 8 ran at 55-75%
/// of the core's peak, the pointwise tiles over the gathered pixels at
/// 81-88%. Epilogue as for the pointwise conv.
/// Returns 0, or 1 for a geometry it does not compute ([`gather_unfit`])
/// or pixels or panels past the last.
///
/// # Safety
/// `w`, `x`, `y`, `geo` (and `ep`'s pointers) must be valid for the
/// geometry and the images the pixels reach; `y` must not overlap `x`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_conv_gather_nchw8c(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: *const IntoBlockedGeom,
    q0: usize,
    q1: usize,
    n0: usize,
    n1: usize,
    ep: *const Epilogue,
) -> i32 {
    gathered(w, x, y, &*geo, (q0, q1), (n0, n1), ep, Path::best())
}

/// [`dnnc_conv_gather_nchw8c`] on `path`.
#[allow(clippy::too_many_arguments)]
unsafe fn gathered(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: &IntoBlockedGeom,
    (q0, q1): (usize, usize),
    (n0, n1): (usize, usize),
    ep: *const Epilogue,
    path: Path,
) -> i32 {
    let g = geo.conv;
    let hw = g.oh * g.ow;
    if gather_unfit(geo).is_some() || q1 > geo.n * hw || n1 > panel_count(geo.m) {
        return 1;
    }
    if q0 >= q1 || n0 >= n1 {
        return 0;
    }
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    let (k, m) = (geo.taps(), geo.m);
    let piece = gather_piece_pixels(hw, k, m);
    let mut cols = GATHER_COLUMNS.with(|c| std::mem::take(&mut *c.borrow_mut()));
    if cols.len() < piece * k {
        cols.resize(piece * k, 0.0);
    }
    for (img, p0, p1) in image_runs((q0, q1), hw) {
        let xi = x.add(img * g.c * g.h * g.w);
        let out = Out::of_image(y, ep.res, img, (m, hw));
        let mut c0 = p0;
        while c0 < p1 {
            let c1 = (c0 + piece).min(p1);
            gather_columns(&g, xi, (c0, c1), &mut cols);
            let inp = In {
                x: cols.as_ptr(),
                block: (c1 - c0) * 8,
                origin: c0,
            };
            let kstep = k_step(path, k, c1 - c0, &out);
            image(w, k, m, &inp, &out, (c0, c1), (n0, n1), &ep, path, kstep);
            c0 = c1;
        }
    }
    GATHER_COLUMNS.with(|c| *c.borrow_mut() = cols);
    0
}

/// Copies the input pixels under output pixels `[c0, c1)` of one blocked
/// image `x` (`[C/8][H][W][8]`) of 1x1 conv `g` into `cols` as `[C/8][c1
/// - c0][8]`, zeros where a pixel falls in the padding.
unsafe fn gather_columns(
    g: &Group8Geom,
    x: *const f32,
    (c0, c1): (usize, usize),
    cols: &mut [f32],
) {
    let len = c1 - c0;
    let plane = g.h * g.w * 8;
    let dst = cols.as_mut_ptr();
    for p in c0..c1 {
        let iy = ((p / g.ow) * g.sh) as isize - g.pt as isize;
        let ix = ((p % g.ow) * g.sw) as isize - g.pl as isize;
        let d = dst.add((p - c0) * 8);
        if iy >= 0 && ix >= 0 && (iy as usize) < g.h && (ix as usize) < g.w {
            let src = x.add((iy as usize * g.w + ix as usize) * 8);
            for cb in 0..g.c / 8 {
                std::ptr::copy_nonoverlapping(src.add(cb * plane), d.add(cb * len * 8), 8);
            }
        } else {
            for cb in 0..g.c / 8 {
                std::ptr::write_bytes(d.add(cb * len * 8), 0, 8);
            }
        }
    }
}

/// A thread's buffers for window convs, kept between calls (a fresh
/// allocation of a chunk's copies, up to a few hundred KiB, costs page
/// faults on every call): each tap's offset from its window's top-left
/// element in the input as it lies and in a row's copy, and the
/// zero-padded copies of a chunk's rows ([`fill_copy`]).
#[derive(Default)]
struct WindowScratch {
    in_place: Vec<isize>,
    padded: Vec<isize>,
    copies: Vec<f32>,
}

thread_local! {
    static WINDOW_SCRATCH: std::cell::RefCell<WindowScratch> =
        std::cell::RefCell::new(WindowScratch::default());
}

/// Columns of a blocked row copy: those the row's windows cover, from
/// the leading padding on.
fn copy_width(g: &Group8Geom) -> usize {
    (g.ow - 1) * g.sw + g.kw
}

/// Floats of one output row's copy: an NCHW input's as `[tap][column]`
/// (a row per tap: a stem has few), a blocked input's as
/// `[C/8][kh][copy_width][8]`.
fn copy_len(g: &Group8Geom, blocked: bool) -> usize {
    if blocked {
        g.c * g.kh * copy_width(g)
    } else {
        g.c * g.kh * g.kw * g.ow
    }
}

/// Each tap's offset (filter order `[c][kh][kw]`) in the input and in a
/// row's copy, into `s`; returns the floats between one pixel's window
/// and the next's in each.
fn tap_offsets(g: &Group8Geom, blocked: bool, s: &mut WindowScratch) -> (isize, isize) {
    let taps = g.c * g.kh * g.kw;
    let width = copy_width(g);
    s.in_place.clear();
    s.padded.clear();
    for t in 0..taps {
        let (ch, ky, kx) = (t / (g.kh * g.kw), t / g.kw % g.kh, t % g.kw);
        if blocked {
            let (cb, lane) = (ch / 8, ch % 8);
            s.in_place
                .push(((cb * g.h * g.w + ky * g.w + kx) * 8 + lane) as isize);
            s.padded
                .push((((cb * g.kh + ky) * width + kx) * 8 + lane) as isize);
        } else {
            s.in_place.push((ch * g.h * g.w + ky * g.w + kx) as isize);
            s.padded.push((t * g.ow) as isize);
        }
    }
    if blocked {
        ((8 * g.sw) as isize, (8 * g.sw) as isize)
    } else {
        (g.sw as isize, 1)
    }
}

/// Fills `copy` ([`copy_len`] floats) for the output row whose windows
/// start at input row `iy0` of image `x`: a blocked input's whole row of
/// windows, an NCHW input's output columns `p0..p1`; zeros where the
/// windows reach into the padding.
unsafe fn fill_copy(
    copy: &mut [f32],
    x: *const f32,
    g: &Group8Geom,
    blocked: bool,
    iy0: isize,
    (p0, p1): (usize, usize),
) {
    if p0 >= p1 {
        return;
    }
    if !blocked {
        return gather_patch(copy, x, g, iy0, (p0, p1));
    }
    let width = copy_width(g);
    // The copy's columns `lo..hi` hold input columns `0..`.
    let lo = g.pl.min(width);
    let hi = (g.pl + g.w).min(width);
    for cb in 0..g.c / 8 {
        for ky in 0..g.kh {
            let row = &mut copy[(cb * g.kh + ky) * width * 8..][..width * 8];
            let iy = iy0 + ky as isize;
            if iy < 0 || iy as usize >= g.h {
                row.fill(0.0);
                continue;
            }
            let src = x.add((cb * g.h * g.w + iy as usize * g.w) * 8);
            row[..lo * 8].fill(0.0);
            let n = hi.saturating_sub(lo) * 8;
            row[lo * 8..lo * 8 + n].copy_from_slice(std::slice::from_raw_parts(src, n));
            row[lo * 8 + n..].fill(0.0);
        }
    }
}

/// Taps a window conv's AVX-512 group tiles take at a time: [`K_BLOCK`]
/// for a blocked input of 384 taps or more, unless the residual is the
/// output itself; else all of them. As in the pointwise conv
/// ([`k_step`]) each output is still the bias, then one FMA per tap in
/// order, the partial sums stored in the output between blocks. A
/// four-panel tile streams `64 x taps` filter floats per 6 pixels, from
/// L2 for Inception-v3's 3x3 convs of 288 and 448 channels (2592 and 4032
/// taps).
fn window_k_step(path: Path, geo: &IntoBlockedGeom, y: *const f32, ep: &Epilogue) -> usize {
    let taps = geo.taps();
    if geo.blocked_input == 1 && deep_k(path, taps, ep.res, y) {
        K_BLOCK
    } else if geo.blocked_input == 1
        && path == Path::Avx2
        && taps > AVX2_WINDOW_K_BLOCK
        && !residual_is_output(ep.res, y)
        && avx2_tile_input_bytes(&geo.conv) > AVX2_WINDOW_TILE_INPUT_BYTES
    {
        AVX2_WINDOW_K_BLOCK
    } else {
        taps
    }
}

/// Taps an AVX2 window tile takes at a time where its input over all taps
/// passes [`AVX2_WINDOW_TILE_INPUT_BYTES`]: a 16-channel panel's filter
/// rows for them (16 KiB) stay in L1 while a chunk's tiles pass, and so
/// does each tile's input for them (blocks of 128 and 512 measured no
/// faster).
pub const AVX2_WINDOW_K_BLOCK: usize = 256;

/// Bytes of blocked input one 5-pixel AVX2 window tile of a 16-channel
/// panel reads over all its taps, past which its taps go in
/// [`AVX2_WINDOW_K_BLOCK`] blocks: half of L1. Taken whole, a tile whose
/// input exceeds L1 reads it from L2 for every tap block of eight, next
/// to the panel's filter. Measured at batch 8 (`window_blocked`, best of
/// 6 alternating): Inception-v3's 192 -> 192 7x1 on 17x17 (~27 KiB)
/// 15.05 -> 14.45 ms and 288 -> 384 3x3 stride 2 on 35x35 (~38 KiB)
/// 56.7 -> 54.7; below it blocks lost 1-4%: its 1x7 (~8 KiB), 5x5
/// (~9 KiB) and 80 -> 192 3x3 (~7 KiB), GoogLeNet's 3x3 convs at batch 1
/// (6-8 KiB).
pub const AVX2_WINDOW_TILE_INPUT_BYTES: usize = 16 << 10;

/// [`AVX2_WINDOW_TILE_INPUT_BYTES`]'s measure: blocks of 8 channels,
/// times the window's rows, times the columns 5 pixels' windows span,
/// 32 bytes each.
fn avx2_tile_input_bytes(g: &Group8Geom) -> usize {
    let span = (Path::Avx2.tile_pixels(16) - 1) * g.sw + g.kw;
    g.c / 8 * g.kh * span * 32
}

/// Most 16-channel panels an AVX-512 window tile takes for rows of `ow`
/// pixels (a window tile stays in one row): the group whose row tiles
/// keep the most accumulators busy, the larger group on a tie. Rows of 8
/// pixels run as 3 panels x 8 pixels (24 accumulators), not 4 x 4 (16);
/// rows of 17 or 35 as 4 x 6. (`window_blocked` example: Inception-v3's
/// 1x3 conv on 8x8 maps at batch 8 3.46-3.59 -> 3.06-3.09 ms, its 448 ->
/// 384 3x3 12.98 -> 11.2-11.5.) The backend's filter slices
/// ([`IntoBlockedGeom::slices`]) take this many panels each.
pub fn window_group(ow: usize) -> usize {
    (2..=4)
        .max_by_key(|&g| (g * balanced_tile(ow, GROUP_TILE_PIXELS[g]), g))
        .unwrap_or(4)
}

/// Output pixels (whole rows, at least one) a window conv's chunk of rows
/// takes where its taps go in blocks: each block's filter rows (32 KiB
/// for four panels) stay in L1 while the chunk's tiles pass.
const WINDOW_CHUNK_PIXELS: usize = 128;

/// One output row of a window conv's chunk: where its image's input, its
/// outputs and residual start, and which columns read the input in place.
struct RowPlan {
    /// The row, `img * oh + oy`.
    u: usize,
    x: *const f32,
    iy0: isize,
    y: *mut f32,
    res: *const f32,
    inner: (usize, usize),
}

/// [`dnnc_conv_into_nchw8c`] on `path`.
unsafe fn into_blocked(
    w: *const f32,
    x: *const f32,
    y: *mut f32,
    geo: &IntoBlockedGeom,
    (u0, u1): (usize, usize),
    ep: *const Epilogue,
    path: Path,
) -> i32 {
    if into_unfit(geo).is_some() || u1 > geo.slices * geo.n * geo.conv.oh {
        return 1;
    }
    if u0 >= u1 {
        return 0;
    }
    let ep = if ep.is_null() { Epilogue::NONE } else { *ep };
    let (g, m) = (geo.conv, geo.m);
    let blocked = geo.blocked_input == 1;
    let taps = geo.taps();
    let kstep = window_k_step(path, geo, y, &ep);
    let chunk_rows = if kstep < taps {
        (WINDOW_CHUNK_PIXELS / g.ow).max(1)
    } else {
        1
    };
    let mut scratch = WINDOW_SCRATCH.with(|c| std::mem::take(&mut *c.borrow_mut()));
    // A grouped conv's taps are its group's block's: offsets within the
    // first block, each panel's group adding its block's start below.
    let tap_geom = if geo.grouped() {
        Group8Geom { c: 8, ..g }
    } else {
        g
    };
    let (step, copy_step) = tap_offsets(&tap_geom, blocked, &mut scratch);
    let slot = copy_len(&g, blocked);
    // Output columns whose window lies inside the input's columns.
    let ox_lo = g.pl.div_ceil(g.sw).min(g.ow);
    let ox_hi = if g.w + g.pl >= g.kw {
        ((g.w + g.pl - g.kw) / g.sw + 1).clamp(ox_lo, g.ow)
    } else {
        ox_lo
    };
    // Floats per input pixel.
    let px = if blocked { 8 } else { 1 };
    let plane = g.oh * g.ow;
    // Window tiles that are not group tiles, and all activations, in ymm
    // registers (below).
    let ymm = if path == Path::Avx512 {
        Path::Avx2
    } else {
        path
    };
    let row_group = window_group(g.ow);
    // A grouped 3x3 stride-1 conv's AVX2 tiles read each input pixel once
    // per filter row ([`avx2_group_row_tile`]).
    let group_rows = geo.grouped() && g.kw == 3 && g.sw == 1 && kstep == taps;
    let panels = geo.panels();
    let per_slice = panels.div_ceil(geo.slices);
    let rows_all = geo.n * g.oh;
    let slices = u0 / rows_all..u1.div_ceil(rows_all).min(geo.slices);
    // The rows of slice `slice` the call computes.
    let slice_rows = |slice: usize| {
        (
            u0.max(slice * rows_all) - slice * rows_all,
            u1.min((slice + 1) * rows_all) - slice * rows_all,
        )
    };
    // Each chunk's rows are copied once for all the call's slices.
    let (ra, rb) = if slices.len() > 1 {
        (0, rows_all)
    } else {
        slice_rows(slices.start)
    };
    let slots = chunk_rows.min(rb - ra);
    if scratch.copies.len() < slots * slot {
        scratch.copies.resize(slots * slot, 0.0);
    }
    let mut rows = Vec::with_capacity(slots);
    let mut c0 = ra;
    while c0 < rb {
        let c1 = (c0 + chunk_rows).min(rb);
        rows.clear();
        for (u, copy) in (c0..c1).zip(scratch.copies.chunks_mut(slot)) {
            let (img, oy) = (u / g.oh, u % g.oh);
            let iy0 = (oy * g.sh) as isize - g.pt as isize;
            let row_inside = iy0 >= 0 && iy0 as usize + g.kh <= g.h;
            let xi = x.add(img * g.c * g.h * g.w);
            let yo = img * m * plane + oy * g.ow * 8;
            // Column segments: from the copy, read in place, from the copy.
            let mut inner = if row_inside {
                (ox_lo, ox_hi)
            } else {
                (g.ow, g.ow)
            };
            if blocked {
                // A blocked copy holds the whole row: every tile reads it
                // (in place, a 1x3 conv's 8-pixel rows would run tiles of
                // 1, 6 and 1 pixels).
                if inner != (0, g.ow) {
                    fill_copy(copy, xi, &g, true, iy0, (0, g.ow));
                    inner = (g.ow, g.ow);
                }
            } else {
                fill_copy(copy, xi, &g, false, iy0, (0, inner.0));
                fill_copy(copy, xi, &g, false, iy0, (inner.1, g.ow));
            }
            rows.push(RowPlan {
                u,
                x: xi,
                iy0,
                y: y.add(yo),
                res: if ep.res.is_null() {
                    ep.res
                } else {
                    ep.res.add(yo)
                },
                inner,
            });
        }
        for slice in slices.clone() {
            let (r0, r1) = slice_rows(slice);
            let (p_lo, p_hi) = (slice * per_slice, ((slice + 1) * per_slice).min(panels));
            if r0.max(c0) >= r1.min(c1) || p_lo >= p_hi {
                continue;
            }
            let o_lo = (0..p_lo).fold(0, |o, _| o + geo.panel_width(o));
            for k0 in (0..taps).step_by(kstep) {
                let kc = kstep.min(taps - k0);
                let (mut o, mut panel) = (o_lo, p_lo);
                while panel < p_hi {
                    let width = geo.panel_width(o);
                    // Where the panel's input block starts, in the input
                    // and in a row's copy (a grouped conv's group's block).
                    let (x_block, copy_block) = if geo.grouped() {
                        (
                            (o / 8 * g.h * g.w * 8) as isize,
                            (o / 8 * g.kh * copy_width(&g) * 8) as isize,
                        )
                    } else {
                        (0, 0)
                    };
                    // On AVX-512 groups of 16-channel panels run as zmm tiles
                    // (`avx512_window_group_tile`); the other panels keep the
                    // ymm tile (one-panel zmm tiles of 14 pixels measured
                    // slower on MobileNet-V2's stem, 0.24 -> 0.32 ms), and
                    // every window tile activates in ymm registers (zmm
                    // activations after the stores measured slower:
                    // EfficientNet-B0's SiLU stem at batch 8, 3.65-3.71 ->
                    // 3.89-4.62 ms in alternating profiles).
                    let group = if path == Path::Avx512 && width == 16 {
                        group_panels(m, o, p_hi - panel).min(row_group)
                    } else {
                        1
                    };
                    // Tiles of lone panels take every tap in the first block
                    // on AVX-512; on AVX2 every tile goes block by block.
                    let blocks = group > 1 || path == Path::Avx2;
                    if !blocks && k0 > 0 {
                        o += width;
                        panel += 1;
                        continue;
                    }
                    let mut t = Tile::panel(w, (o, width), (taps, 0), plane * 8, &ep, ymm);
                    if blocks {
                        t.k0 = k0;
                        t.kc = kc;
                    }
                    let tile = if group > 1 {
                        GROUP_TILE_PIXELS[group]
                    } else {
                        ymm.tile_pixels(width)
                    };
                    let block = (o / 8) * plane * 8;
                    for (row, copy) in rows.iter().zip(scratch.copies.chunks(slot)) {
                        if row.u < r0 || row.u >= r1 {
                            continue;
                        }
                        let segments = [
                            (0, row.inner.0, false),
                            (row.inner.0, row.inner.1, true),
                            (row.inner.1, g.ow, false),
                        ];
                        for (s0, s1, in_place) in segments {
                            let mut p = s0;
                            for n in Tiles::new(s1 - s0, tile) {
                                let yo = block + p * 8;
                                let yp = row.y.add(yo);
                                let rp = if row.res.is_null() {
                                    row.res
                                } else {
                                    row.res.add(yo)
                                };
                                let win = if in_place {
                                    let ix0 = (p * g.sw - g.pl) as isize;
                                    Window {
                                        src: row
                                            .x
                                            .offset((row.iy0 * g.w as isize + ix0) * px + x_block),
                                        offs: scratch.in_place.as_ptr(),
                                        ps: step,
                                    }
                                } else {
                                    Window {
                                        src: copy
                                            .as_ptr()
                                            .offset(p as isize * copy_step + copy_block),
                                        offs: scratch.padded.as_ptr(),
                                        ps: copy_step,
                                    }
                                };
                                match path {
                                    #[cfg(target_arch = "x86_64")]
                                    Path::Avx512 if group > 1 => {
                                        avx512_window_group_tile(&t, group, &win, yp, rp, n)
                                    }
                                    #[cfg(target_arch = "x86_64")]
                                    Path::Avx2 | Path::Avx512 if group_rows => {
                                        avx2_group_row_tile(&t, &win, yp, rp, n)
                                    }
                                    #[cfg(target_arch = "x86_64")]
                                    Path::Avx2 | Path::Avx512 => {
                                        avx2_window_tile(&t, &win, yp, rp, n)
                                    }
                                    _ => portable_window_tile(&t, &win, yp, rp, n),
                                }
                                p += n;
                            }
                        }
                    }
                    o += width * group;
                    panel += group;
                }
            }
        }
        c0 = c1;
    }
    WINDOW_SCRATCH.with(|c| *c.borrow_mut() = scratch);
    0
}

/// Where a window tile reads pixel `p`'s input of tap `k`: `src +
/// offs[k] + p * ps`.
struct Window {
    src: *const f32,
    offs: *const isize,
    ps: isize,
}

/// The NCHW inputs of output columns `p0..p1` of the row whose windows
/// start at input row `iy0`, tap by tap (`patch[tap * ow + column]`, the
/// filter's `[c][kh][kw]` order), zero where a window reaches into the
/// padding.
unsafe fn gather_patch(
    patch: &mut [f32],
    x: *const f32,
    g: &Group8Geom,
    iy0: isize,
    (p0, p1): (usize, usize),
) {
    for t in 0..g.c * g.kh * g.kw {
        let (ch, ky, kx) = (t / (g.kh * g.kw), t / g.kw % g.kh, t % g.kw);
        let iy = iy0 + ky as isize;
        let row = &mut patch[t * g.ow..(t + 1) * g.ow];
        if iy < 0 || iy as usize >= g.h {
            row[p0..p1].fill(0.0);
            continue;
        }
        let xr = x.add(ch * g.h * g.w + iy as usize * g.w);
        for (p, v) in row.iter_mut().enumerate().take(p1).skip(p0) {
            let ix = (p * g.sw + kx) as isize - g.pl as isize;
            *v = if ix >= 0 && (ix as usize) < g.w {
                *xr.add(ix as usize)
            } else {
                0.0
            };
        }
    }
}

/// A window tile one lane at a time, in the AVX2 tile's order (bias,
/// taps in order, residual, clamp, activation).
unsafe fn portable_window_tile(t: &Tile, win: &Window, y: *mut f32, res: *const f32, n: usize) {
    for px in 0..n {
        for j in 0..t.width {
            let mut acc = if t.bias.is_null() {
                0.0
            } else {
                *t.bias.add(j)
            };
            for kk in 0..t.k {
                let a = *win.src.offset(*win.offs.add(kk) + px as isize * win.ps);
                acc = t.w.add(kk * t.width + j).read().mul_add(a, acc);
            }
            portable_store(t, acc, (j / 8) * t.y_stride + px * 8 + j % 8, y, res);
        }
    }
}

/// A window tile of `n` pixels of one panel on AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_window_tile(t: &Tile, win: &Window, y: *mut f32, res: *const f32, n: usize) {
    dispatch_tile!(avx2_window_tile_n, n, t.width, (t, win, y, res))
}

/// [`avx2_tile_n`] with the input of each tap and pixel at its window
/// offset: one filter row of the panel and one broadcast per pixel per
/// tap, over the tile's k block (from the bias or the partial sums the
/// block before stored in `y`; the epilogue only after the last).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn avx2_window_tile_n<const NP: usize, const NB: usize>(
    t: &Tile,
    win: &Window,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    let mut acc = tile_accumulators!(t, NB);
    if t.k0 > 0 {
        // A later k block: the partial sums the previous one stored.
        for (p, row) in acc.iter_mut().enumerate().take(NP) {
            for (b, v) in row.iter_mut().enumerate().take(NB) {
                *v = _mm256_loadu_ps(y.add(b * t.y_stride + p * 8));
            }
        }
    }
    let ps = win.ps;
    let mut wp = t.w.add(t.k0 * NB * 8);
    macro_rules! px {
        ($a:expr, $w0:ident, $w1:ident, $w2:ident, $p:literal) => {
            if $p < NP {
                let v = _mm256_broadcast_ss(&*$a.offset($p * ps));
                acc[$p][0] = _mm256_fmadd_ps($w0, v, acc[$p][0]);
                if NB > 1 {
                    acc[$p][1] = _mm256_fmadd_ps($w1, v, acc[$p][1]);
                }
                if NB > 2 {
                    acc[$p][2] = _mm256_fmadd_ps($w2, v, acc[$p][2]);
                }
            }
        };
    }
    for kk in t.k0..t.k0 + t.kc {
        let a = win.src.offset(*win.offs.add(kk));
        let w0 = _mm256_loadu_ps(wp);
        let w1 = if NB > 1 {
            _mm256_loadu_ps(wp.add(8))
        } else {
            w0
        };
        let w2 = if NB > 2 {
            _mm256_loadu_ps(wp.add(16))
        } else {
            w0
        };
        px!(a, w0, w1, w2, 0);
        px!(a, w0, w1, w2, 1);
        px!(a, w0, w1, w2, 2);
        px!(a, w0, w1, w2, 3);
        px!(a, w0, w1, w2, 4);
        px!(a, w0, w1, w2, 5);
        px!(a, w0, w1, w2, 6);
        px!(a, w0, w1, w2, 7);
        px!(a, w0, w1, w2, 8);
        px!(a, w0, w1, w2, 9);
        wp = wp.add(NB * 8);
    }
    if t.k0 + t.kc < t.k {
        // Not the last block: the partial sums as they are.
        for (p, row) in acc.iter().enumerate().take(NP) {
            for (b, &v) in row.iter().enumerate().take(NB) {
                _mm256_storeu_ps(y.add(b * t.y_stride + p * 8), v);
            }
        }
        return;
    }
    tile_store!(t, acc, y, res, NP, NB);
}

/// A window tile of `n` pixels of a grouped 3x3 stride-1 conv's panel
/// (one group of eight channels, [`IntoBlockedGeom::groups`]) on AVX2,
/// from a blocked input (in place or a row's copy: pixels and a window's
/// columns 8 floats apart). A group's output pixel sums only 72
/// products, eight channels of each input pixel, so the window tile's one
/// broadcast per pixel and tap fed a single FMA: RegNet-Y's grouped convs
/// at batch 8 ran at 25-51% of the core's peak. Here each filter row (an
/// input channel and a window row: three taps) loads its three filter
/// vectors once, and each input pixel under the tile's windows is
/// broadcast once for the (up to three) outputs whose windows hold it.
/// Output `p` still takes the taps in filter order (an input pixel's
/// taps reach `p` in the order of its columns), so its bits are
/// [`avx2_window_tile`]'s. At stride 2 two outputs share a broadcast at
/// most, and such a tile (LLVM spilled two of its ten accumulators) ran
/// 0.7-1.3x the window tile's time across RegNet-Y's four stride-2
/// shapes, so those keep the window tile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_group_row_tile(t: &Tile, win: &Window, y: *mut f32, res: *const f32, n: usize) {
    match n {
        10 => avx2_group_row_tile_n::<10>(t, win, y, res),
        9 => avx2_group_row_tile_n::<9>(t, win, y, res),
        8 => avx2_group_row_tile_n::<8>(t, win, y, res),
        7 => avx2_group_row_tile_n::<7>(t, win, y, res),
        6 => avx2_group_row_tile_n::<6>(t, win, y, res),
        5 => avx2_group_row_tile_n::<5>(t, win, y, res),
        4 => avx2_group_row_tile_n::<4>(t, win, y, res),
        3 => avx2_group_row_tile_n::<3>(t, win, y, res),
        2 => avx2_group_row_tile_n::<2>(t, win, y, res),
        _ => avx2_group_row_tile_n::<1>(t, win, y, res),
    }
}

/// The output of an `NP`-pixel stride-1 tile whose window column `kx`
/// is the tile's input pixel `j`, or `NP` for none.
const fn group_row_slot<const NP: usize>(j: usize, kx: usize) -> usize {
    if j >= kx && j - kx < NP {
        j - kx
    } else {
        NP
    }
}

/// [`avx2_group_row_tile`] for `NP` pixels.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn avx2_group_row_tile_n<const NP: usize>(
    t: &Tile,
    win: &Window,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    const NB: usize = 1;
    let mut acc = tile_accumulators!(t, NB);
    let mut wp = t.w;
    // Input pixel `$j` of the tile's windows (`$j < NP + 2`) times filter
    // column `kx` into output `$j - kx`, where that is one of the tile's.
    macro_rules! column {
        ($a:expr, $w:expr, $j:literal) => {
            if $j < NP + 2 {
                let v = _mm256_broadcast_ss(&*$a.add($j * 8));
                for (kx, w) in $w.iter().enumerate() {
                    let p = group_row_slot::<NP>($j, kx);
                    if p < NP {
                        acc[p][0] = _mm256_fmadd_ps(*w, v, acc[p][0]);
                    }
                }
            }
        };
    }
    let mut kk = 0;
    while kk < t.k {
        // Filter row `kk / 3`: one input channel, one window row.
        let a = win.src.offset(*win.offs.add(kk));
        let w = [
            _mm256_loadu_ps(wp),
            _mm256_loadu_ps(wp.add(8)),
            _mm256_loadu_ps(wp.add(16)),
        ];
        column!(a, w, 0);
        column!(a, w, 1);
        column!(a, w, 2);
        column!(a, w, 3);
        column!(a, w, 4);
        column!(a, w, 5);
        column!(a, w, 6);
        column!(a, w, 7);
        column!(a, w, 8);
        column!(a, w, 9);
        column!(a, w, 10);
        column!(a, w, 11);
        wp = wp.add(3 * 8);
        kk += 3;
    }
    tile_store!(t, acc, y, res, NP, NB);
}

/// Where [`image`] writes: pixel `p` of output block `b` at `y + b *
/// block + (p - origin) * 8`, the residual at the same offset of `res`
/// (or null).
struct Out {
    y: *mut f32,
    res: *const f32,
    block: usize,
    origin: usize,
}

impl Out {
    /// Image `img` of a batch in `[N, m/8, hw, 8]`, its residual (null
    /// for none) at the same offsets.
    ///
    /// # Safety
    /// `y` (and `res`, unless null) must address at least `img + 1`
    /// images.
    unsafe fn of_image(y: *mut f32, res: *const f32, img: usize, (m, hw): (usize, usize)) -> Out {
        let at = img * m * hw;
        Out {
            y: y.add(at),
            res: if res.is_null() { res } else { res.add(at) },
            block: hw * 8,
            origin: 0,
        }
    }
}

/// Where [`image`] reads: pixel `p` of input block `b` at `x + b * block
/// + (p - origin) * 8`.
struct In {
    x: *const f32,
    block: usize,
    origin: usize,
}

/// One image's pixels `[p0, p1)`, chunk by chunk; in a chunk the group
/// tiles go through `k` in blocks of `kstep` input channels ([`k_step`];
/// `k` for none), the other tiles take all of it in the first block.
#[allow(clippy::too_many_arguments)]
unsafe fn image(
    w: *const f32,
    k: usize,
    m: usize,
    inp: &In,
    out: &Out,
    (p0, p1): (usize, usize),
    (n0, n1): (usize, usize),
    ep: &Epilogue,
    path: Path,
    kstep: usize,
) {
    let chunk = if kstep < k {
        (K_BLOCK_CHUNK_FLOATS / kstep / TILE_LCM * TILE_LCM).max(TILE_LCM)
    } else if whole_map(p1 - p0, k, m) {
        p1 - p0
    } else {
        (CHUNK_FLOATS / k / TILE_LCM * TILE_LCM).max(TILE_LCM)
    };
    let mut c0 = p0;
    while c0 < p1 {
        let c1 = (c0 + chunk).min(p1);
        for k0 in (0..k).step_by(kstep) {
            let kc = kstep.min(k - k0);
            let mut o = 0;
            let mut panel = 0;
            while o < m && panel < n1 {
                let width = panel_width(m, o);
                if panel < n0 {
                    o += width;
                    panel += 1;
                    continue;
                }
                // On AVX-512, up to four consecutive 16-channel panels run as
                // one tile (`avx512_group_tile`).
                let group = if path == Path::Avx512 && width == 16 {
                    group_panels(m, o, n1 - panel)
                } else {
                    1
                };
                let tile = if group > 1 {
                    GROUP_TILE_PIXELS[group]
                } else {
                    path.tile_pixels(width)
                };
                if group == 1 && k0 > 0 {
                    o += width;
                    panel += 1;
                    continue;
                }
                let mut t = Tile::panel(w, (o, width), (k, inp.block), out.block, ep, path);
                if group > 1 {
                    t.k0 = k0;
                    t.kc = kc;
                }
                let block = (o / 8) * out.block;
                let mut p = c0;
                // Tile operands from pixel `p`: input, output, residual.
                let at = |p: usize| {
                    let yo = block + (p - out.origin) * 8;
                    let rp = if out.res.is_null() {
                        out.res
                    } else {
                        out.res.add(yo)
                    };
                    let xo = (p - inp.origin) * 8 + k0 / 8 * inp.block;
                    (inp.x.add(xo), out.y.add(yo), rp)
                };
                // Tiles of lone panels run only in the first block (`k0`
                // 0). Each run of equal tiles is one call on AVX2 (see
                // `avx2_tiles`), a call per tile on the other paths.
                for (n, count) in Tiles::new(c1 - c0, tile).runs() {
                    #[cfg(target_arch = "x86_64")]
                    if path == Path::Avx2 {
                        let (xp, yp, rp) = at(p);
                        avx2_tiles(&t, xp, yp, rp, (n, count));
                        p += n * count;
                        continue;
                    }
                    for _ in 0..count {
                        let (xp, yp, rp) = at(p);
                        match path {
                            #[cfg(target_arch = "x86_64")]
                            Path::Avx512 if group > 1 => {
                                avx512_group_tile(&t, group, xp, yp, rp, n)
                            }
                            #[cfg(target_arch = "x86_64")]
                            Path::Avx512 => avx512_tile(&t, xp, yp, rp, n),
                            _ => portable_tile(&t, xp, yp, rp, n),
                        }
                        p += n;
                    }
                }
                o += width * group;
                panel += group;
            }
        }
        c0 = c1;
    }
}

/// One panel's view of the filter and epilogue.
struct Tile {
    /// The panel, `[k][width]`.
    w: *const f32,
    /// Output channels in the panel: 16 or 8.
    width: usize,
    /// Input channels.
    k: usize,
    /// Floats between consecutive input channel blocks of one image.
    stride: usize,
    /// Floats between consecutive output channel blocks (the residual's
    /// too).
    y_stride: usize,
    /// The panel's bias, or null.
    bias: *const f32,
    lo: f32,
    hi: f32,
    act: u32,
    /// Whether the activation runs in zmm registers ([`Path::Avx512`]).
    wide_act: bool,
    /// The `k` block a group tile computes: input channels `k0..k0 +
    /// kc`, starting from the bias (`k0` = 0) or from the partial sums
    /// in the output, and finished with the epilogue only where it ends
    /// at `k` (else the partial sums are stored as they are).
    k0: usize,
    kc: usize,
}

impl Tile {
    /// The panel of `width` output channels from channel `o` of a filter
    /// packed by [`pack_filter`] (`k` deep, input blocks `stride` floats
    /// apart), its outputs' blocks `y_stride` apart, with `ep`'s bias
    /// from channel `o`, clamp and activation (in zmm registers on
    /// `path` [`Path::Avx512`]).
    unsafe fn panel(
        w: *const f32,
        (o, width): (usize, usize),
        (k, stride): (usize, usize),
        y_stride: usize,
        ep: &Epilogue,
        path: Path,
    ) -> Tile {
        Tile {
            w: w.add(o * k),
            width,
            k,
            stride,
            y_stride,
            bias: if ep.bias.is_null() {
                std::ptr::null()
            } else {
                ep.bias.add(o)
            },
            lo: ep.lo,
            hi: ep.hi,
            act: ep.act,
            wide_act: path == Path::Avx512,
            k0: 0,
            kc: k,
        }
    }
}

/// One output of a portable tile at offset `off`: residual, clamp,
/// activation, in the AVX2 tiles' order.
unsafe fn portable_store(t: &Tile, mut acc: f32, off: usize, y: *mut f32, res: *const f32) {
    if !res.is_null() {
        acc += *res.add(off);
    }
    let clamped = if acc.is_nan() {
        acc
    } else {
        acc.clamp(t.lo, t.hi)
    };
    *y.add(off) = activate(t.act, clamped);
}

/// A tile of `n` pixels of one panel, one lane at a time: the AVX2 tile's
/// arithmetic in the same order (bias, then `k` in order, residual,
/// clamp, activation), for machines without AVX2.
unsafe fn portable_tile(t: &Tile, x: *const f32, y: *mut f32, res: *const f32, n: usize) {
    for px in 0..n {
        for j in 0..t.width {
            let mut acc = if t.bias.is_null() {
                0.0
            } else {
                *t.bias.add(j)
            };
            for kk in 0..t.k {
                let a = *x.add((kk / 8) * t.stride + px * 8 + kk % 8);
                acc = t.w.add(kk * t.width + j).read().mul_add(a, acc);
            }
            portable_store(t, acc, (j / 8) * t.y_stride + px * 8 + j % 8, y, res);
        }
    }
}

/// A tile of `n` pixels of one panel: `n x` blocks ymm
/// accumulators, one filter row of the panel and one broadcast input
/// element per `k`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile(t: &Tile, x: *const f32, y: *mut f32, res: *const f32, n: usize) {
    avx2_tiles(t, x, y, res, (n, 1))
}

/// `count` consecutive tiles of `n` pixels each, in one call: with a
/// short `k` (SqueezeNet's 16 -> 64 expand convs, MobileNet-V2's 16 -> 96)
/// a tile is under a hundred cycles of FMAs, and a call, a dispatch and
/// a setup per tile add a third to that.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tiles(
    t: &Tile,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
    (n, count): (usize, usize),
) {
    debug_assert!(n <= Path::Avx2.tile_pixels(t.width));
    dispatch_tile!(avx2_tile_n, n, t.width, (t, x, y, res, count))
}

/// One function per shape (`inline(never)`): inlined into the dispatch,
/// LLVM left the accumulators in memory and stored them every step.
/// Runs `count` tiles, each `NP` pixels past the last.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn avx2_tile_n<const NP: usize, const NB: usize>(
    t: &Tile,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
    count: usize,
) {
    for i in 0..count {
        let off = i * NP * 8;
        let r = if res.is_null() { res } else { res.add(off) };
        avx2_tile_body::<NP, NB>(t, x.add(off), y.add(off), r);
    }
}

/// The body of one [`avx2_tile_n`] tile, always inlined into its loop.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn avx2_tile_body<const NP: usize, const NB: usize>(
    t: &Tile,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    let (k, stride) = (t.k, t.stride);
    // Every access to `acc` has literal indices (the largest shape's
    // array; the guards fold away): with a loop index anywhere, LLVM kept
    // the accumulators in memory around the k loop, or in it.
    let mut acc = tile_accumulators!(t, NB);
    // One input block (eight `k`) per iteration, unrolled, so every
    // broadcast's address is a constant offset from the block's start.
    let mut wp = t.w;
    // Literal pixel indices: with a `for` over them LLVM kept `acc` in
    // memory and stored every accumulator each step.
    macro_rules! px {
        ($a:expr, $kk:literal, $w0:ident, $w1:ident, $w2:ident, $p:literal) => {
            if $p < NP {
                let v = _mm256_broadcast_ss(&*$a.add($p * 8 + $kk));
                acc[$p][0] = _mm256_fmadd_ps($w0, v, acc[$p][0]);
                if NB > 1 {
                    acc[$p][1] = _mm256_fmadd_ps($w1, v, acc[$p][1]);
                }
                if NB > 2 {
                    acc[$p][2] = _mm256_fmadd_ps($w2, v, acc[$p][2]);
                }
            }
        };
    }
    macro_rules! step {
        ($a:expr, $kk:literal) => {{
            let w0 = _mm256_loadu_ps(wp.add($kk * NB * 8));
            let w1 = if NB > 1 {
                _mm256_loadu_ps(wp.add($kk * NB * 8 + 8))
            } else {
                w0
            };
            let w2 = if NB > 2 {
                _mm256_loadu_ps(wp.add($kk * NB * 8 + 16))
            } else {
                w0
            };
            px!($a, $kk, w0, w1, w2, 0);
            px!($a, $kk, w0, w1, w2, 1);
            px!($a, $kk, w0, w1, w2, 2);
            px!($a, $kk, w0, w1, w2, 3);
            px!($a, $kk, w0, w1, w2, 4);
            px!($a, $kk, w0, w1, w2, 5);
            px!($a, $kk, w0, w1, w2, 6);
            px!($a, $kk, w0, w1, w2, 7);
            px!($a, $kk, w0, w1, w2, 8);
            px!($a, $kk, w0, w1, w2, 9);
        }};
    }
    k_blocks!(x, stride, k, step, wp, NB * 8);
    tile_store!(t, acc, y, res, NP, NB);
}

/// A tile of `n` pixels of one panel on AVX-512: a 16-channel panel
/// row is one zmm register (two output blocks), a 24-channel one a zmm
/// and a ymm; 8-channel panels run the ymm tile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn avx512_tile(t: &Tile, x: *const f32, y: *mut f32, res: *const f32, n: usize) {
    macro_rules! by_pixels {
        ($w24:literal, [$($np:literal)*], $max:literal) => {
            match n {
                $($np => avx512_tile_n::<$np, $w24>(t, x, y, res),)*
                _ => avx512_tile_n::<$max, $w24>(t, x, y, res),
            }
        };
    }
    match t.width {
        16 => by_pixels!(false, [1 2 3 4 5 6 7 8 9 10 11 12 13], 14),
        24 => by_pixels!(true, [1 2 3 4 5 6 7], 8),
        _ => avx2_tile(t, x, y, res, n),
    }
}

/// [`avx2_tile_n`] in zmm registers: per `k`, the panel's filter row (a
/// zmm, plus a ymm when `W24`) and one broadcast per pixel feeding its
/// FMAs. Literal accumulator indices throughout, as there.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline(never)]
unsafe fn avx512_tile_n<const NP: usize, const W24: bool>(
    t: &Tile,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    let (k, stride) = (t.k, t.stride);
    let width = if W24 { 24 } else { 16 };
    let (mut a16, mut a8) = zmm_accumulators!(t, W24);
    let mut wp = t.w;
    macro_rules! px {
        ($a:expr, $kk:literal, $w16:ident, $w8:ident, $p:literal) => {
            if $p < NP {
                let s = *$a.add($p * 8 + $kk);
                a16[$p] = _mm512_fmadd_ps($w16, _mm512_set1_ps(s), a16[$p]);
                if W24 {
                    a8[$p] = _mm256_fmadd_ps($w8, _mm256_set1_ps(s), a8[$p]);
                }
            }
        };
    }
    macro_rules! step {
        ($a:expr, $kk:literal) => {{
            let w16 = _mm512_loadu_ps(wp.add($kk * width));
            let w8 = if W24 {
                _mm256_loadu_ps(wp.add($kk * width + 16))
            } else {
                _mm256_setzero_ps()
            };
            px!($a, $kk, w16, w8, 0);
            px!($a, $kk, w16, w8, 1);
            px!($a, $kk, w16, w8, 2);
            px!($a, $kk, w16, w8, 3);
            px!($a, $kk, w16, w8, 4);
            px!($a, $kk, w16, w8, 5);
            px!($a, $kk, w16, w8, 6);
            px!($a, $kk, w16, w8, 7);
            px!($a, $kk, w16, w8, 8);
            px!($a, $kk, w16, w8, 9);
            px!($a, $kk, w16, w8, 10);
            px!($a, $kk, w16, w8, 11);
            px!($a, $kk, w16, w8, 12);
            px!($a, $kk, w16, w8, 13);
        }};
    }
    k_blocks!(x, stride, k, step, wp, width);
    zmm_store!(t, a16, a8, y, res, NP, W24);
}

/// The accumulators of a group tile ([`avx512_group_tile_n`]), `[pixel]
/// [panel]` zmm, each starting at its panel's bias (or zero): the largest
/// shape's array, every access with literal indices (see
/// [`avx2_tile_n`]).
#[cfg(target_arch = "x86_64")]
macro_rules! group_accumulators {
    ($t:expr, $g:ident) => {{
        use std::arch::x86_64::*;
        let bias = |j: usize| {
            if j >= $g || $t.bias.is_null() {
                _mm512_setzero_ps()
            } else {
                _mm512_loadu_ps($t.bias.add(16 * j))
            }
        };
        [[bias(0), bias(1), bias(2), bias(3)]; 12]
    }};
}

/// One pixel's FMAs in a group tile: the broadcast input element `$s`
/// times each panel's filter row.
#[cfg(target_arch = "x86_64")]
macro_rules! group_fmas {
    ($acc:ident, $g:ident, $np:ident, $s:expr, ($w0:ident, $w1:ident, $w2:ident, $w3:ident), $p:literal) => {
        if $p < $np {
            let s = _mm512_set1_ps($s);
            $acc[$p][0] = _mm512_fmadd_ps($w0, s, $acc[$p][0]);
            if $g > 1 {
                $acc[$p][1] = _mm512_fmadd_ps($w1, s, $acc[$p][1]);
            }
            if $g > 2 {
                $acc[$p][2] = _mm512_fmadd_ps($w2, s, $acc[$p][2]);
            }
            if $g > 3 {
                $acc[$p][3] = _mm512_fmadd_ps($w3, s, $acc[$p][3]);
            }
        }
    };
}

/// One accumulator of a group tile (pixel `$p`, panel `$j`, literals)
/// stored through [`store8`] as its two 8-channel blocks.
#[cfg(target_arch = "x86_64")]
macro_rules! group_out {
    ($t:expr, $acc:ident, ($y:expr, $res:expr), ($g:ident, $np:ident), ($lo:ident, $hi:ident), $p:literal, $j:literal) => {
        if $p < $np && $j < $g {
            let v = $acc[$p][$j];
            let v0 = _mm512_castps512_ps256(v);
            let v1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
            store8(v0, $y, $res, 2 * $j * $t.y_stride + $p * 8, ($lo, $hi));
            store8(
                v1,
                $y,
                $res,
                (2 * $j + 1) * $t.y_stride + $p * 8,
                ($lo, $hi),
            );
        }
    };
}

/// [`group_out`] for every panel of the listed pixels.
#[cfg(target_arch = "x86_64")]
macro_rules! group_out_pixels {
    ($t:expr, $acc:ident, $out:tt, $shape:tt, $bounds:tt, $($p:literal)*) => {$(
        group_out!($t, $acc, $out, $shape, $bounds, $p, 0);
        group_out!($t, $acc, $out, $shape, $bounds, $p, 1);
        group_out!($t, $acc, $out, $shape, $bounds, $p, 2);
        group_out!($t, $acc, $out, $shape, $bounds, $p, 3);
    )*};
}

/// Stores a group tile's accumulators ([`group_out`]), then activates
/// them.
#[cfg(target_arch = "x86_64")]
macro_rules! group_store {
    ($t:expr, $acc:ident, $y:expr, $res:expr, $g:ident, $np:ident) => {{
        use std::arch::x86_64::*;
        let (lo, hi) = (_mm256_set1_ps($t.lo), _mm256_set1_ps($t.hi));
        group_out_pixels!($t, $acc, ($y, $res), ($g, $np), (lo, hi), 0 1 2 3 4 5 6 7 8 9 10 11);
        activate_tile($t, $y, $np, 2 * $g);
    }};
}

/// Loads a group tile's partial sums from its output (a later `k`
/// block's start).
#[cfg(target_arch = "x86_64")]
macro_rules! group_partials {
    ($t:expr, $acc:ident, $y:expr, $g:ident, $np:ident) => {{
        use std::arch::x86_64::*;
        for p in 0..$np {
            for j in 0..$g {
                let lo = _mm256_loadu_ps($y.add(2 * j * $t.y_stride + p * 8));
                let hi = _mm256_loadu_ps($y.add((2 * j + 1) * $t.y_stride + p * 8));
                let v = _mm512_castps256_ps512(lo);
                let v = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
                    _mm512_castps_pd(v),
                    _mm256_castps_pd(hi),
                ));
                $acc[p][j] = v;
            }
        }
    }};
}

/// Stores a group tile's partial sums as they are (a `k` block before the
/// last).
#[cfg(target_arch = "x86_64")]
macro_rules! group_store_partials {
    ($t:expr, $acc:ident, $y:expr, $g:ident, $np:ident) => {{
        use std::arch::x86_64::*;
        for p in 0..$np {
            for j in 0..$g {
                let v = $acc[p][j];
                let lo = _mm512_castps512_ps256(v);
                let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
                _mm256_storeu_ps($y.add(2 * j * $t.y_stride + p * 8), lo);
                _mm256_storeu_ps($y.add((2 * j + 1) * $t.y_stride + p * 8), hi);
            }
        }
    }};
}

/// Calls `$f::<G, NP>` for a group tile of `$g` panels and `$n` pixels
/// (at most [`GROUP_TILE_PIXELS`]`[$g]`).
#[cfg(target_arch = "x86_64")]
macro_rules! dispatch_group {
    ($f:ident, $g:expr, $n:expr, ($($arg:expr),*)) => {
        match ($g, $n) {
            (4, 1) => $f::<4, 1>($($arg),*),
            (4, 2) => $f::<4, 2>($($arg),*),
            (4, 3) => $f::<4, 3>($($arg),*),
            (4, 4) => $f::<4, 4>($($arg),*),
            (4, 5) => $f::<4, 5>($($arg),*),
            (4, _) => $f::<4, 6>($($arg),*),
            (3, 1) => $f::<3, 1>($($arg),*),
            (3, 2) => $f::<3, 2>($($arg),*),
            (3, 3) => $f::<3, 3>($($arg),*),
            (3, 4) => $f::<3, 4>($($arg),*),
            (3, 5) => $f::<3, 5>($($arg),*),
            (3, 6) => $f::<3, 6>($($arg),*),
            (3, 7) => $f::<3, 7>($($arg),*),
            (3, _) => $f::<3, 8>($($arg),*),
            (_, 1) => $f::<2, 1>($($arg),*),
            (_, 2) => $f::<2, 2>($($arg),*),
            (_, 3) => $f::<2, 3>($($arg),*),
            (_, 4) => $f::<2, 4>($($arg),*),
            (_, 5) => $f::<2, 5>($($arg),*),
            (_, 6) => $f::<2, 6>($($arg),*),
            (_, 7) => $f::<2, 7>($($arg),*),
            (_, 8) => $f::<2, 8>($($arg),*),
            (_, 9) => $f::<2, 9>($($arg),*),
            (_, 10) => $f::<2, 10>($($arg),*),
            (_, 11) => $f::<2, 11>($($arg),*),
            (_, _) => $f::<2, 12>($($arg),*),
        }
    };
}

/// A tile of `n` pixels of `g` (2 to 4) consecutive 16-channel panels
/// on AVX-512, the first `t`'s: per `k`, one zmm filter row of each panel
/// and one broadcast per pixel feeding `g` FMAs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn avx512_group_tile(
    t: &Tile,
    g: usize,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
    n: usize,
) {
    dispatch_group!(avx512_group_tile_n, g, n, (t, x, y, res))
}

/// [`avx512_group_tile`] for `G` panels and `NP` pixels. Each output is
/// the bias, then one FMA per `k` in order, as in every tile, so the
/// results are bitwise the one-panel tiles'. Against the one-panel tile
/// (14 pixels, one filter row per 14 broadcasts) four panels of 6 pixels
/// broadcast each input element once per 64 channels, not 16, but read
/// each filter row once per 6 pixels, not 14: MobileNet-V2's pointwise
/// kernels ran 0.85 of the one-panel tiles' time at one thread (batch 8:
/// 0.91). Standalone, with the input swept from cache between runs
/// (`nchwc_pointwise` example), shapes of `k` 384 and more ran 1.4-2.3x
/// slower (the filter streaming from L2 once per 6 pixels), those of `k`
/// 64-256 and large maps up to 22% faster; deep `k` now goes in blocks
/// ([`k_step`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline(never)]
unsafe fn avx512_group_tile_n<const G: usize, const NP: usize>(
    t: &Tile,
    x: *const f32,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    let (k, stride) = (t.k, t.stride);
    // Panel `j`'s rows start `j * 16 * k` floats after the first's.
    let panel_stride = 16 * k;
    let z = _mm512_setzero_ps();
    let mut acc = group_accumulators!(t, G);
    if t.k0 > 0 {
        group_partials!(t, acc, y, G, NP);
    }
    let mut wp = t.w.add(16 * t.k0);
    macro_rules! step {
        ($a:expr, $kk:literal) => {{
            let row = wp.add($kk * 16);
            let w0 = _mm512_loadu_ps(row);
            let w1 = if G > 1 {
                _mm512_loadu_ps(row.add(panel_stride))
            } else {
                z
            };
            let w2 = if G > 2 {
                _mm512_loadu_ps(row.add(2 * panel_stride))
            } else {
                z
            };
            let w3 = if G > 3 {
                _mm512_loadu_ps(row.add(3 * panel_stride))
            } else {
                z
            };
            group_fmas!(acc, G, NP, *$a.add(8 * 0 + $kk), (w0, w1, w2, w3), 0);
            group_fmas!(acc, G, NP, *$a.add(8 * 1 + $kk), (w0, w1, w2, w3), 1);
            group_fmas!(acc, G, NP, *$a.add(8 * 2 + $kk), (w0, w1, w2, w3), 2);
            group_fmas!(acc, G, NP, *$a.add(8 * 3 + $kk), (w0, w1, w2, w3), 3);
            group_fmas!(acc, G, NP, *$a.add(8 * 4 + $kk), (w0, w1, w2, w3), 4);
            group_fmas!(acc, G, NP, *$a.add(8 * 5 + $kk), (w0, w1, w2, w3), 5);
            group_fmas!(acc, G, NP, *$a.add(8 * 6 + $kk), (w0, w1, w2, w3), 6);
            group_fmas!(acc, G, NP, *$a.add(8 * 7 + $kk), (w0, w1, w2, w3), 7);
            group_fmas!(acc, G, NP, *$a.add(8 * 8 + $kk), (w0, w1, w2, w3), 8);
            group_fmas!(acc, G, NP, *$a.add(8 * 9 + $kk), (w0, w1, w2, w3), 9);
            group_fmas!(acc, G, NP, *$a.add(8 * 10 + $kk), (w0, w1, w2, w3), 10);
            group_fmas!(acc, G, NP, *$a.add(8 * 11 + $kk), (w0, w1, w2, w3), 11);
        }};
    }
    k_blocks!(x, stride, t.kc, step, wp, 16);
    if t.k0 + t.kc < k {
        group_store_partials!(t, acc, y, G, NP);
    } else {
        group_store!(t, acc, y, res, G, NP);
    }
}

/// [`avx512_group_tile`] for a window conv into the blocked layout
/// ([`dnnc_conv_into_nchw8c`]): pixel `p`'s input of tap `k` at its window
/// offset ([`Window`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn avx512_window_group_tile(
    t: &Tile,
    g: usize,
    win: &Window,
    y: *mut f32,
    res: *const f32,
    n: usize,
) {
    dispatch_group!(avx512_window_group_tile_n, g, n, (t, win, y, res))
}

/// [`avx512_window_group_tile`] for `G` panels and `NP` pixels: per tap,
/// one zmm filter row of each panel and one broadcast per pixel, each
/// output the bias then one FMA per tap in order, as the ymm window
/// tile's (bitwise the same).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline(never)]
unsafe fn avx512_window_group_tile_n<const G: usize, const NP: usize>(
    t: &Tile,
    win: &Window,
    y: *mut f32,
    res: *const f32,
) {
    use std::arch::x86_64::*;
    let panel_stride = 16 * t.k;
    let z = _mm512_setzero_ps();
    let mut acc = group_accumulators!(t, G);
    if t.k0 > 0 {
        group_partials!(t, acc, y, G, NP);
    }
    let step = win.ps;
    let mut wp = t.w.add(16 * t.k0);
    for kk in t.k0..t.k0 + t.kc {
        let a = win.src.offset(*win.offs.add(kk));
        let w0 = _mm512_loadu_ps(wp);
        let w1 = if G > 1 {
            _mm512_loadu_ps(wp.add(panel_stride))
        } else {
            z
        };
        let w2 = if G > 2 {
            _mm512_loadu_ps(wp.add(2 * panel_stride))
        } else {
            z
        };
        let w3 = if G > 3 {
            _mm512_loadu_ps(wp.add(3 * panel_stride))
        } else {
            z
        };
        group_fmas!(acc, G, NP, *a, (w0, w1, w2, w3), 0);
        group_fmas!(acc, G, NP, *a.offset(step), (w0, w1, w2, w3), 1);
        group_fmas!(acc, G, NP, *a.offset(2 * step), (w0, w1, w2, w3), 2);
        group_fmas!(acc, G, NP, *a.offset(3 * step), (w0, w1, w2, w3), 3);
        group_fmas!(acc, G, NP, *a.offset(4 * step), (w0, w1, w2, w3), 4);
        group_fmas!(acc, G, NP, *a.offset(5 * step), (w0, w1, w2, w3), 5);
        group_fmas!(acc, G, NP, *a.offset(6 * step), (w0, w1, w2, w3), 6);
        group_fmas!(acc, G, NP, *a.offset(7 * step), (w0, w1, w2, w3), 7);
        group_fmas!(acc, G, NP, *a.offset(8 * step), (w0, w1, w2, w3), 8);
        group_fmas!(acc, G, NP, *a.offset(9 * step), (w0, w1, w2, w3), 9);
        group_fmas!(acc, G, NP, *a.offset(10 * step), (w0, w1, w2, w3), 10);
        group_fmas!(acc, G, NP, *a.offset(11 * step), (w0, w1, w2, w3), 11);
        wp = wp.add(16);
    }
    if t.k0 + t.kc < t.k {
        group_store_partials!(t, acc, y, G, NP);
    } else {
        group_store!(t, acc, y, res, G, NP);
    }
}

/// Eight outputs of a tile at offset `off` (floats) of `y`: residual
/// (`res`'s same offset, if any), clamp to `lo..hi` (the activation
/// follows in [`activate_tile`]). Every vector tile stores through them,
/// so they all round alike.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store8(
    mut v: std::arch::x86_64::__m256,
    y: *mut f32,
    res: *const f32,
    off: usize,
    (lo, hi): (std::arch::x86_64::__m256, std::arch::x86_64::__m256),
) {
    use std::arch::x86_64::*;
    if !res.is_null() {
        v = _mm256_add_ps(v, _mm256_loadu_ps(res.add(off)));
    }
    _mm256_storeu_ps(y.add(off), _mm256_min_ps(hi, _mm256_max_ps(lo, v)));
}

/// The tile's activation (`t.act`), applied to its `np` pixels of `nb`
/// blocks after [`store8`] stored them clamped: eight vectors at a time
/// from L1, each step across all eight (`act8_n`, bitwise the scalar
/// [`activate`]), where one vector's ~20-step chain, division included,
/// would wait on itself. With `t.wide_act` (the zmm tiles) in zmm
/// registers (`activate_zmm`): EfficientNet-B0's 16 -> 96 expansion at
/// 112x112, batch 8, 6.86-7.26 -> 6.58-6.66 ms in 4 alternating pairs. Out of line: in the tile's store sequence the
/// activation of each accumulator kept one chain in flight (EfficientNet-
/// B0's 16-deep expansions were epilogue-bound), and called there it
/// clobbered the accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn activate_tile(t: &Tile, y: *mut f32, np: usize, nb: usize) {
    if t.act == ACT_NONE {
        return;
    }
    if t.wide_act {
        for b in 0..nb {
            super::pgemm::x86::activate_zmm(t.act, y.add(b * t.y_stride), np * 8);
        }
        return;
    }
    for b in 0..nb {
        let run = y.add(b * t.y_stride);
        match t.act {
            ACT_SIGMOID => activate_run::<ACT_SIGMOID>(run, np),
            _ => activate_run::<ACT_SILU>(run, np),
        }
    }
}

/// Activation `ACT` over the `n` vectors at `p`, in place.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn activate_run<const ACT: u32>(p: *mut f32, n: usize) {
    let mut i = 0;
    while i + 8 <= n {
        activate_vectors::<ACT, 8>(p.add(i * 8));
        i += 8;
    }
    // The rest as one group: a 16-wide panel's 5 pixels went as a chain
    // of 4 and a lone one, a 24-wide panel's 3 as three lone ones
    // (EfficientNet-B0 at batch 8, one thread, 8 alternating profiles:
    // 111.7 -> 108.8 ms in kernels, its 16 -> 96 expansion block 11.5 ->
    // 10.2). Gathering both blocks' vectors through a pointer array
    // instead ran 22% slower.
    let p = p.add(i * 8);
    match n - i {
        0 => {}
        1 => activate_vectors::<ACT, 1>(p),
        2 => activate_vectors::<ACT, 2>(p),
        3 => activate_vectors::<ACT, 3>(p),
        4 => activate_vectors::<ACT, 4>(p),
        5 => activate_vectors::<ACT, 5>(p),
        6 => activate_vectors::<ACT, 6>(p),
        _ => activate_vectors::<ACT, 7>(p),
    }
}

/// Activation `ACT` over the `N` vectors at `p`, in place, each step
/// across all of them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn activate_vectors<const ACT: u32, const N: usize>(p: *mut f32) {
    use super::pgemm::x86::act8_n;
    use std::arch::x86_64::*;
    let mut v = [_mm256_setzero_ps(); N];
    for (j, v) in v.iter_mut().enumerate() {
        *v = _mm256_loadu_ps(p.add(j * 8));
    }
    for (j, v) in act8_n::<ACT, N>(v).iter().enumerate() {
        _mm256_storeu_ps(p.add(j * 8), *v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test epilogue: `bias`, the residual `res` when `with_res`, the
    /// clamp `lo..hi` and activation `act`.
    fn test_ep(
        bias: &[f32],
        (res, with_res): (&[f32], bool),
        (lo, hi): (f32, f32),
        act: u32,
    ) -> Epilogue {
        Epilogue {
            bias: bias.as_ptr(),
            res: if with_res {
                res.as_ptr()
            } else {
                std::ptr::null()
            },
            lo,
            hi,
            act,
            ..Epilogue::NONE
        }
    }

    /// The plain definition: `y[o][p] = bias[o] + sum_c w[o][c] x[c][p] +
    /// res[o][p]`, clamped, on blocked addresses.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        w: &[f32],
        x: &[f32],
        bias: &[f32],
        res: Option<&[f32]>,
        (n, m, k, hw): (usize, usize, usize, usize),
        (lo, hi): (f32, f32),
    ) -> Vec<f32> {
        let at = |ch: usize, img: usize, p: usize, chans: usize| {
            img * chans * hw + (ch / 8) * hw * 8 + p * 8 + ch % 8
        };
        let mut y = vec![0f32; n * m * hw];
        for img in 0..n {
            for o in 0..m {
                for p in 0..hw {
                    let mut acc = bias[o] as f64;
                    for c in 0..k {
                        acc += w[o * k + c] as f64 * x[at(c, img, p, k)] as f64;
                    }
                    let i = at(o, img, p, m);
                    if let Some(r) = res {
                        acc += r[i] as f64;
                    }
                    y[i] = (acc as f32).max(lo).min(hi);
                }
            }
        }
        y
    }

    /// `dnnc_conv1x1_nchw8c` of `packed` (`m x k`) over `x` (`n`
    /// images of `hw` pixels) with `ep`, one call per `bounds` window of
    /// pixels, as tasks would call it.
    fn conv(
        packed: &[f32],
        (n, m, k, hw): (usize, usize, usize, usize),
        x: &[f32],
        ep: &Epilogue,
        bounds: &[usize],
    ) -> Vec<f32> {
        let mut y = vec![f32::NAN; n * m * hw];
        for s in bounds.windows(2) {
            let rc = unsafe {
                dnnc_conv1x1_nchw8c(
                    packed.as_ptr(),
                    k,
                    m,
                    x.as_ptr(),
                    y.as_mut_ptr(),
                    hw,
                    s[0],
                    s[1],
                    0,
                    panel_count(m),
                    ep,
                )
            };
            assert_eq!(rc, 0);
        }
        y
    }

    fn run(n: usize, m: usize, k: usize, hw: usize, with_res: bool, split: &[usize]) {
        let x: Vec<f32> = (0..n * k * hw)
            .map(|i| ((i * 7919) % 101) as f32 * 0.01 - 0.5)
            .collect();
        let w: Vec<f32> = (0..m * k)
            .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
            .collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.01 - 0.1).collect();
        let res: Vec<f32> = (0..n * m * hw)
            .map(|i| (i % 13) as f32 * 0.1 - 0.6)
            .collect();
        let packed = pack_filter(&w, m, k);
        let ep = test_ep(&bias, (&res, with_res), (-0.25, 0.75), ACT_NONE);
        // Each split point starts a call, as tasks would.
        let mut bounds = vec![0];
        bounds.extend_from_slice(split);
        bounds.push(n * hw);
        let y = conv(&packed, (n, m, k, hw), &x, &ep, &bounds);
        let want = reference(
            &w,
            &x,
            &bias,
            with_res.then_some(&res[..]),
            (n, m, k, hw),
            (-0.25, 0.75),
        );
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                "element {i}: {a} vs {b}"
            );
        }
    }

    /// Sigmoid and SiLU epilogues give bitwise the scalar [`activate`]
    /// of the clamped sum (every tile shape: 24-, 16- and 8-wide panels,
    /// full and partial pixel tiles), large inputs included so the
    /// sigmoid's clamp bounds are crossed.
    #[test]
    fn activations_are_bitwise_the_scalar_ones() {
        let (n, m, k, hw) = (1, 48, 16, 29);
        let x: Vec<f32> = (0..n * k * hw)
            .map(|i| ((i * 7919) % 101) as f32 * 1.5 - 75.0)
            .collect();
        let w: Vec<f32> = (0..m * k)
            .map(|i| ((i * 31) % 97) as f32 * 0.02 - 0.96)
            .collect();
        let packed = pack_filter(&w, m, k);
        let call = |act: u32| {
            let ep = Epilogue {
                lo: -150.0,
                hi: 90.0,
                act,
                ..Epilogue::NONE
            };
            conv(&packed, (n, m, k, hw), &x, &ep, &[0, n * hw])
        };
        let plain = call(ACT_NONE);
        for act in [ACT_SIGMOID, ACT_SILU] {
            for (i, (a, v)) in call(act).iter().zip(&plain).enumerate() {
                let want = activate(act, *v);
                assert_eq!(
                    a.to_bits(),
                    want.to_bits(),
                    "act {act} element {i}: {a} vs {want} of {v}"
                );
            }
        }
        assert!(plain.iter().any(|v| *v < -88.0) && plain.iter().any(|v| *v > 87.0));
    }

    /// A pointwise conv's input (`k` channels of `hw` pixels, blocked),
    /// bias, residual and filter packed by [`pack_filter`], `m` outputs:
    /// deterministic values of mixed sign.
    fn tile_operands(m: usize, k: usize, hw: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let x: Vec<f32> = (0..k * hw)
            .map(|i| ((i * 7919) % 101) as f32 * 0.05 - 2.5)
            .collect();
        let w: Vec<f32> = (0..m * k)
            .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
            .collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.01 - 0.1).collect();
        let res: Vec<f32> = (0..m * hw).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
        (x, bias, res, pack_filter(&w, m, k))
    }

    /// [`image`] over all `hw` pixels and every panel of `packed` (the
    /// filter) and `x` into a fresh output, in `kstep` blocks on `path`;
    /// the output starts as NaN so an unwritten element shows.
    fn run_image(
        (packed, x): (&[f32], &[f32]),
        (m, k, hw): (usize, usize, usize),
        ep: &Epilogue,
        path: Path,
        kstep: usize,
    ) -> Vec<f32> {
        let mut y = vec![f32::NAN; m * hw];
        let out = Out {
            y: y.as_mut_ptr(),
            res: ep.res,
            block: hw * 8,
            origin: 0,
        };
        let all = (0, usize::MAX);
        let inp = In {
            x: x.as_ptr(),
            block: hw * 8,
            origin: 0,
        };
        unsafe {
            image(
                packed.as_ptr(),
                k,
                m,
                &inp,
                &out,
                (0, hw),
                all,
                ep,
                path,
                kstep,
            )
        };
        y
    }

    /// The ymm and zmm tiles give bitwise the portable tile's result
    /// (same FMA order, same epilogue) on every panel width (8, 16, 24
    /// channels), groups of two to four 16-channel zmm panels, full and
    /// partial pixel tiles of every tile size, with residual and
    /// activations; a path this machine lacks is reported, not run.
    #[test]
    fn every_path_is_bitwise_the_portable_one() {
        let best = Path::best();
        let paths: Vec<Path> = [Path::Avx2, Path::Avx512]
            .into_iter()
            .filter(|&p| p == Path::Avx2 && best != Path::Portable || p == best)
            .collect();
        if !paths.contains(&Path::Avx512) {
            eprintln!("every_path_is_bitwise_the_portable_one: no AVX-512 here, zmm tiles not run");
        }
        for (m, k, hw) in [
            (8, 16, 13),
            (24, 24, 29),
            (40, 8, 49),
            (48, 64, 31),
            (56, 16, 17),
            (64, 32, 29),
            (112, 24, 31),
            (136, 16, 13),
        ] {
            let (x, bias, res, packed) = tile_operands(m, k, hw);
            for (act, with_res) in [(ACT_NONE, true), (ACT_SILU, false), (ACT_SIGMOID, true)] {
                let ep = test_ep(&bias, (&res, with_res), (-3.0, 2.5), act);
                let run = |path: Path| run_image((&packed, &x), (m, k, hw), &ep, path, k);
                let want = run(Path::Portable);
                assert!(want.iter().all(|v| v.is_finite()));
                for &path in &paths {
                    let got = run(path);
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "{path:?} m={m} k={k} hw={hw} act={act} element {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    /// Group tiles going through `k` in blocks (partial sums stored and
    /// reloaded) give bitwise the result of one pass over `k`, with
    /// bias, residual, clamp and activations, on panel counts that make
    /// groups of four, three and two and a lone 8- or 24-channel panel
    /// (which takes all of `k` in the first block), odd block remainders
    /// and pixel counts with partial tiles; an in-place residual is
    /// never blocked.
    #[test]
    fn k_blocks_are_bitwise_one_pass() {
        if Path::best() != Path::Avx512 {
            eprintln!("k_blocks_are_bitwise_one_pass: no AVX-512 here, group tiles not run");
            return;
        }
        for (m, k, hw) in [
            (64, 384, 131),
            (120, 520, 128),
            (48, 1024, 150),
            (200, 392, 140),
        ] {
            let (x, bias, res, packed) = tile_operands(m, k, hw);
            let mut y = [0f32; 8];
            let out = Out {
                y: y.as_mut_ptr(),
                res: res.as_ptr(),
                block: hw * 8,
                origin: 0,
            };
            assert_eq!(k_step(Path::Avx512, k, hw, &out), K_BLOCK);
            for (act, with_res) in [(ACT_NONE, true), (ACT_SILU, false), (ACT_SIGMOID, true)] {
                let ep = test_ep(&bias, (&res, with_res), (-3.0, 2.5), act);
                let run = |kstep| run_image((&packed, &x), (m, k, hw), &ep, Path::Avx512, kstep);
                let want = run(k);
                assert!(want.iter().all(|v| v.is_finite()));
                for kstep in [K_BLOCK, 136] {
                    let got = run(kstep);
                    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            a.to_bits(),
                            b.to_bits(),
                            "m={m} k={k} hw={hw} act={act} block {kstep} element {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
        // The residual read in place is never blocked; short maps and
        // shallow `k` are not either.
        let mut y = vec![0f32; 8];
        let in_place = Out {
            y: y.as_mut_ptr(),
            res: y.as_ptr(),
            block: 8,
            origin: 0,
        };
        assert_eq!(k_step(Path::Avx512, 512, 200, &in_place), 512);
        let apart = Out {
            res: std::ptr::null(),
            ..in_place
        };
        assert_eq!(k_step(Path::Avx512, 512, 100, &apart), 512);
        assert_eq!(k_step(Path::Avx512, 256, 200, &apart), 256);
        assert_eq!(k_step(Path::Avx2, 512, 200, &apart), 512);
        assert_eq!(k_step(Path::Avx512, 512, 200, &apart), K_BLOCK);
    }

    #[test]
    fn tiles_and_their_runs_are_the_balanced_tiles_in_order() {
        for tile in 1..16 {
            for len in 0..200 {
                let mut expected = Vec::new();
                let mut left = len;
                while left > 0 {
                    let n = balanced_tile(left, tile);
                    expected.push(n);
                    left -= n;
                }
                let got: Vec<usize> = Tiles::new(len, tile).collect();
                assert_eq!(got, expected, "{len} pixels in tiles of {tile}");
                let runs: Vec<usize> = Tiles::new(len, tile)
                    .runs()
                    .flat_map(|(n, count)| std::iter::repeat_n(n, count))
                    .collect();
                assert_eq!(runs, expected, "{len} pixels in runs of tiles of {tile}");
            }
        }
    }

    #[test]
    fn panel_splits_cover_every_channel_once() {
        let (n, m, k, hw) = (2, 56, 16, 9);
        let x: Vec<f32> = (0..n * k * hw).map(|i| (i % 7) as f32 * 0.1).collect();
        let w: Vec<f32> = (0..m * k).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
        let packed = pack_filter(&w, m, k);
        let panels = panel_count(m);
        assert_eq!(panels, 3, "24 + 16 + 16");
        let mut whole = vec![0f32; n * m * hw];
        let mut split = vec![f32::NAN; n * m * hw];
        let (xp, wp, ep) = (x.as_ptr(), packed.as_ptr(), Epilogue::NONE);
        unsafe {
            dnnc_conv1x1_nchw8c(
                wp,
                k,
                m,
                xp,
                whole.as_mut_ptr(),
                hw,
                0,
                n * hw,
                0,
                panels,
                &ep,
            );
            for (a, b) in [(0, 1), (1, 3)] {
                dnnc_conv1x1_nchw8c(wp, k, m, xp, split.as_mut_ptr(), hw, 0, n * hw, a, b, &ep);
            }
        }
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&whole), bits(&split));
    }

    #[test]
    fn bands_are_bitwise_the_whole_call() {
        // 40 channels out (a 24-wide panel, then 16), a 9 x 11 image cut
        // into bands of rows and a ragged pixel range, written into a
        // ring-like buffer with its own block stride.
        let (m, k, hw, wd) = (40, 24, 99, 11);
        let x: Vec<f32> = (0..k * hw)
            .map(|i| ((i * 13) % 29) as f32 * 0.05 - 0.7)
            .collect();
        let w: Vec<f32> = (0..m * k)
            .map(|i| ((i * 17) % 23) as f32 * 0.04 - 0.4)
            .collect();
        let bias: Vec<f32> = (0..m).map(|i| i as f32 * 0.02 - 0.3).collect();
        let packed = pack_filter(&w, m, k);
        let ep = Epilogue {
            bias: bias.as_ptr(),
            lo: 0.0,
            hi: 6.0,
            ..Epilogue::NONE
        };
        let mut whole = vec![0f32; m * hw];
        let (xp, wp) = (x.as_ptr(), packed.as_ptr());
        unsafe {
            let rc = dnnc_conv1x1_nchw8c(
                wp,
                k,
                m,
                xp,
                whole.as_mut_ptr(),
                hw,
                0,
                hw,
                0,
                panel_count(m),
                &ep,
            );
            assert_eq!(rc, 0);
        }
        for (p0, p1) in [(0, wd), (2 * wd, 5 * wd), (7, 60), (8 * wd, hw)] {
            let y_block = (p1 - p0) * 8 + 24;
            let mut band = vec![f32::NAN; m / 8 * y_block];
            let rc = unsafe {
                dnnc_conv1x1_nchw8c_band(wp, k, m, xp, hw, p0, p1, band.as_mut_ptr(), y_block, &ep)
            };
            assert_eq!(rc, 0);
            for b in 0..m / 8 {
                for p in p0..p1 {
                    for l in 0..8 {
                        let got = band[b * y_block + (p - p0) * 8 + l];
                        let want = whole[b * hw * 8 + p * 8 + l];
                        assert_eq!(got.to_bits(), want.to_bits(), "block {b} pixel {p}");
                    }
                }
                // Past the band's pixels nothing is written.
                assert!(band[b * y_block + (p1 - p0) * 8].is_nan());
            }
        }
        // With a residual, read at the band's offsets of its own pointer.
        let res: Vec<f32> = (0..m * hw).map(|i| (i % 7) as f32 * 0.3 - 1.0).collect();
        let with_res = Epilogue {
            res: res.as_ptr(),
            ..ep
        };
        let mut whole_res = vec![0f32; m * hw];
        let mut band = vec![0f32; m * hw];
        let (p0, p1) = (3 * wd, 4 * wd);
        unsafe {
            dnnc_conv1x1_nchw8c(
                wp,
                k,
                m,
                xp,
                whole_res.as_mut_ptr(),
                hw,
                0,
                hw,
                0,
                panel_count(m),
                &with_res,
            );
            let band_res = Epilogue {
                res: res.as_ptr().add(p0 * 8),
                ..ep
            };
            let y = band.as_mut_ptr().add(p0 * 8);
            let rc = dnnc_conv1x1_nchw8c_band(wp, k, m, xp, hw, p0, p1, y, hw * 8, &band_res);
            assert_eq!(rc, 0);
        }
        for b in 0..m / 8 {
            for i in b * hw * 8 + p0 * 8..b * hw * 8 + p1 * 8 {
                assert_eq!(band[i].to_bits(), whole_res[i].to_bits(), "element {i}");
            }
        }
    }

    #[test]
    fn matches_the_definition_on_tiles_panels_and_splits() {
        // 24 channels out: a panel of 16 and one of 8; 49 pixels: 8 tiles
        // of 6 and one of 1; two images split mid-image.
        run(2, 24, 16, 49, true, &[30, 49, 60]);
        run(1, 16, 32, 13, false, &[]);
        run(1, 8, 8, 1, true, &[]);
        run(3, 40, 48, 7, true, &[5, 6, 7, 20]);
        // Odd block counts: a 24-wide first panel (4-pixel tiles).
        run(1, 24, 16, 30, true, &[13]);
        run(2, 56, 24, 17, false, &[3]);
        // AVX-512 group tiles: 24 channels, then groups of four and three
        // 16-channel panels; and one group of four over a deep filter.
        run(2, 136, 40, 29, true, &[11, 35]);
        run(1, 64, 256, 50, false, &[]);
    }

    /// The plain definition of a conv into the blocked layout, in f64,
    /// before the clamp.
    fn window_reference(
        g: &IntoBlockedGeom,
        n: usize,
        (w, x, bias): (&[f32], &[f32], &[f32]),
        res: Option<&[f32]>,
    ) -> Vec<f64> {
        let c = g.conv;
        // Input channels per group, and each output channel's first.
        let cg = c.c / g.groups;
        let mut y = vec![0f64; n * g.m * c.oh * c.ow];
        for img in 0..n {
            for o in 0..g.m {
                let c0 = o / (g.m / g.groups) * cg;
                for oy in 0..c.oh {
                    for ox in 0..c.ow {
                        let mut acc = bias[o] as f64;
                        for ch in c0..c0 + cg {
                            for ky in 0..c.kh {
                                for kx in 0..c.kw {
                                    let iy = (oy * c.sh + ky) as isize - c.pt as isize;
                                    let ix = (ox * c.sw + kx) as isize - c.pl as isize;
                                    if iy < 0 || ix < 0 || iy as usize >= c.h || ix as usize >= c.w
                                    {
                                        continue;
                                    }
                                    let xv = x[((img * c.c + ch) * c.h + iy as usize) * c.w
                                        + ix as usize];
                                    let wv = w[((o * cg + ch - c0) * c.kh + ky) * c.kw + kx];
                                    acc += xv as f64 * wv as f64;
                                }
                            }
                        }
                        let i =
                            ((img * g.m / 8 + o / 8) * c.oh * c.ow + oy * c.ow + ox) * 8 + o % 8;
                        if let Some(r) = res {
                            acc += r[i] as f64;
                        }
                        y[i] = acc;
                    }
                }
            }
        }
        y
    }

    fn window_geom(
        (c, h, w): (usize, usize, usize),
        m: usize,
        (kh, kw): (usize, usize),
        (sh, sw): (usize, usize),
        pads: [usize; 4],
    ) -> IntoBlockedGeom {
        let oh = (h + pads[0] + pads[2] - kh) / sh + 1;
        let ow = (w + pads[1] + pads[3] - kw) / sw + 1;
        IntoBlockedGeom {
            conv: Group8Geom {
                c,
                h,
                w,
                oh,
                ow,
                kh,
                kw,
                sh,
                sw,
                pt: pads[0],
                pl: pads[1],
            },
            m,
            blocked_input: 0,
            slices: 1,
            groups: 1,
            n: 1,
        }
    }

    /// Runs `dnnc_conv_into_nchw8c` on `n` images of `g` (units split at
    /// `split`; the input reordered into blocks where `g.blocked_input`
    /// says so) on `path` and checks it against the definition; returns
    /// the result.
    fn window_run(
        g: &IntoBlockedGeom,
        n: usize,
        act: u32,
        with_res: bool,
        split: &[usize],
        path: Path,
    ) -> Vec<f32> {
        let g = &IntoBlockedGeom { n, ..*g };
        let d = WindowCase::new(g);
        let ep = d.ep(with_res, act);
        let mut y = vec![f32::NAN; d.res.len()];
        let mut bounds = vec![0];
        bounds.extend_from_slice(split);
        bounds.push(g.slices * n * g.conv.oh);
        for s in bounds.windows(2) {
            let rc = unsafe {
                into_blocked(
                    d.packed.as_ptr(),
                    d.xin.as_ptr(),
                    y.as_mut_ptr(),
                    g,
                    (s[0], s[1]),
                    &ep,
                    path,
                )
            };
            assert_eq!(rc, 0);
        }
        d.check(g, &y, with_res, act);
        y
    }

    /// A window conv's test data: the input (NCHW, and as the kernel
    /// reads it: reordered into blocks where `blocked_input` says so),
    /// the filter (and packed), the bias, a residual, the clamp.
    struct WindowCase {
        x: Vec<f32>,
        xin: Vec<f32>,
        w: Vec<f32>,
        packed: Vec<f32>,
        bias: Vec<f32>,
        res: Vec<f32>,
        clamp: (f32, f32),
    }

    impl WindowCase {
        fn new(g: &IntoBlockedGeom) -> WindowCase {
            let (c, n) = (g.conv, g.n);
            let x: Vec<f32> = (0..n * c.c * c.h * c.w)
                .map(|i| ((i * 7919) % 101) as f32 * 0.02 - 1.0)
                .collect();
            // `[N, C/8, H, W, 8]` for a blocked input.
            let xin = if g.blocked_input == 1 {
                let hw = c.h * c.w;
                let mut b = vec![0f32; x.len()];
                for (i, v) in x.iter().enumerate() {
                    let (img, ch, p) = (i / (c.c * hw), i / hw % c.c, i % hw);
                    b[((img * c.c / 8 + ch / 8) * hw + p) * 8 + ch % 8] = *v;
                }
                b
            } else {
                x.clone()
            };
            let w: Vec<f32> = (0..g.m * c.c / g.groups * c.kh * c.kw)
                .map(|i| ((i * 31) % 97) as f32 * 0.01 - 0.48)
                .collect();
            let packed = if g.groups > 1 {
                pack_grouped_filter(&w, g.m, g.taps())
            } else {
                pack_filter(&w, g.m, c.c * c.kh * c.kw)
            };
            let len = n * g.m * c.oh * c.ow;
            WindowCase {
                x,
                xin,
                w,
                packed,
                bias: (0..g.m).map(|i| i as f32 * 0.01 - 0.1).collect(),
                res: (0..len).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect(),
                clamp: (-1.5, 2.0),
            }
        }

        /// The epilogue: bias, the residual where `with_res`, the
        /// clamp, `act`.
        fn ep(&self, with_res: bool, act: u32) -> Epilogue {
            test_ep(&self.bias, (&self.res, with_res), self.clamp, act)
        }

        /// Checks result `y` of [`WindowCase::ep`]'s epilogue against
        /// the definition.
        fn check(&self, g: &IntoBlockedGeom, y: &[f32], with_res: bool, act: u32) {
            let res = with_res.then_some(&self.res[..]);
            let want = window_reference(g, g.n, (&self.w, &self.x, &self.bias), res);
            let (lo, hi) = self.clamp;
            for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                let b = activate(act, (*b as f32).clamp(lo, hi)) as f64;
                assert!(
                    (*a as f64 - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                    "{g:?} element {i}: {a} vs {b}"
                );
            }
        }
    }

    /// The AVX paths this machine runs, each checked bitwise against the
    /// portable one.
    fn window_paths(test: &str) -> Vec<Path> {
        let best = Path::best();
        let paths: Vec<Path> = [Path::Avx2, Path::Avx512]
            .into_iter()
            .filter(|&p| p == Path::Avx2 && best != Path::Portable || p == best)
            .collect();
        if !paths.contains(&Path::Avx512) {
            eprintln!("{test}: no AVX-512 here, zmm tiles not run");
        }
        paths
    }

    /// Runs every case on every path and activation, each path bitwise
    /// the portable one.
    fn window_cases(test: &str, cases: &[(IntoBlockedGeom, usize, &[usize])]) {
        let paths = window_paths(test);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        for &(g, n, split) in cases {
            for (act, with_res) in [
                (ACT_NONE, false),
                (ACT_NONE, true),
                (ACT_SILU, false),
                (ACT_SIGMOID, true),
            ] {
                let portable = window_run(&g, n, act, with_res, split, Path::Portable);
                for &path in &paths {
                    let fast = window_run(&g, n, act, with_res, split, path);
                    assert_eq!(
                        bits(&portable),
                        bits(&fast),
                        "{g:?} act {act}: {path:?} differs from the portable path"
                    );
                }
            }
        }
    }

    #[test]
    fn window_conv_into_blocks_matches_the_definition() {
        let cases = [
            // A stem: 3 channels, 3x3 stride 2, padding 1 (top and left
            // only reach into it), 32 channels out in two 16-wide panels.
            (
                window_geom((3, 15, 29), 32, (3, 3), (2, 2), [1, 1, 1, 1]),
                2,
                &[3, 9][..],
            ),
            // 24 channels, then a group of four 16-channel panels (zmm
            // tiles of 6 pixels on AVX-512), then one of three (8).
            (
                window_geom((3, 11, 13), 136, (3, 3), (2, 2), [1, 1, 1, 1]),
                2,
                &[5][..],
            ),
            // A 24-wide panel (4-pixel tiles), then 16; padding on every
            // side; rows split mid-image.
            (
                window_geom((2, 9, 14), 40, (3, 3), (1, 1), [1, 1, 1, 1]),
                1,
                &[4],
            ),
            // Asymmetric window, strides and padding; rows wholly in the
            // padding; one block out.
            (
                window_geom((1, 6, 20), 8, (5, 3), (1, 3), [3, 2, 3, 0]),
                1,
                &[],
            ),
            // Maps narrower than a tile, a window as wide as the input.
            (
                window_geom((4, 5, 3), 16, (2, 3), (1, 1), [0, 0, 1, 0]),
                3,
                &[1, 2],
            ),
        ];
        window_cases("window_conv_into_blocks_matches_the_definition", &cases);
    }

    #[test]
    fn window_convs_on_blocked_inputs_match_the_definition() {
        let blocked = |g: IntoBlockedGeom| IntoBlockedGeom {
            blocked_input: 1,
            ..g
        };
        let sliced = |g: IntoBlockedGeom, slices| IntoBlockedGeom { slices, ..g };
        let grouped = |g: IntoBlockedGeom| IntoBlockedGeom {
            groups: g.m / 8,
            ..g
        };
        // A grouped 3x3 conv of `c` channels in and out (groups of 8) on a
        // blocked input.
        let grouped3 =
            |(c, h, w), s, pads| grouped(blocked(window_geom((c, h, w), c, (3, 3), (s, s), pads)));
        let cases = [
            // Inception's 5x5, padding 2: every row copied whole (the
            // windows reach into the columns' padding).
            (
                blocked(window_geom((16, 9, 11), 40, (5, 5), (1, 1), [2, 2, 2, 2])),
                2,
                &[5][..],
            ),
            // 1x7 and 7x1 with padding on one axis only; 7x1 rows wholly
            // inside read in place.
            (
                blocked(window_geom((8, 7, 12), 64, (1, 7), (1, 1), [0, 3, 0, 3])),
                1,
                &[3][..],
            ),
            (
                blocked(window_geom((8, 12, 6), 32, (7, 1), (1, 1), [3, 0, 3, 0])),
                2,
                &[7, 13][..],
            ),
            // Stride 2: unpadded (every row in place) and padded; a 1x1
            // stride-2 projection.
            (
                blocked(window_geom((24, 13, 13), 72, (3, 3), (2, 2), [0; 4])),
                1,
                &[],
            ),
            (
                blocked(window_geom((16, 10, 9), 48, (3, 3), (2, 2), [1, 1, 1, 1])),
                1,
                &[2],
            ),
            (
                blocked(window_geom((32, 8, 8), 64, (1, 1), (2, 2), [0; 4])),
                2,
                &[],
            ),
            // 432 taps: in blocks of 128 on AVX-512 and 256 on AVX2, in
            // chunks of rows, the units split mid-chunk.
            (
                blocked(window_geom((48, 9, 14), 80, (3, 3), (1, 1), [1, 1, 1, 1])),
                2,
                &[3, 11][..],
            ),
            // A 7x1 of 896 taps in blocks on AVX2 (~18 KiB of input a
            // tile): rows in place and copied, a chunk of rows split
            // between calls.
            (
                blocked(window_geom((128, 10, 6), 24, (7, 1), (1, 1), [3, 0, 3, 0])),
                2,
                &[5, 13][..],
            ),
            // The filter's 96 channels in 6 panels shared into 3 slices
            // (units `slice * 7 + row`), the calls' units crossing slices.
            (
                sliced(
                    blocked(window_geom((48, 13, 13), 96, (3, 3), (2, 2), [1, 1, 1, 1])),
                    3,
                ),
                1,
                &[5, 16][..],
            ),
            // A 24-wide first panel, odd slices, residual from the rows.
            (
                sliced(
                    blocked(window_geom((8, 6, 6), 56, (3, 3), (1, 1), [1, 1, 1, 1])),
                    2,
                ),
                2,
                &[1, 12, 20][..],
            ),
            // Grouped, eight channels in and out per group (RegNet's):
            // stride 1 padded (rows copied), padded on H only (rows inside
            // read in place, tiles of 9 and 8) and unpadded (rows of 1 and
            // 4 pixels; more below); stride 2 padded and unpadded; groups
            // shared into slices.
            (grouped3((48, 9, 13), 1, [1, 1, 1, 1]), 2, &[4, 11][..]),
            (grouped3((24, 8, 19), 1, [1, 0, 1, 0]), 2, &[3, 10][..]),
            (grouped3((16, 12, 3), 1, [0; 4]), 1, &[]),
            (grouped3((16, 3, 6), 1, [0; 4]), 1, &[]),
            (grouped3((24, 11, 10), 2, [1, 1, 1, 1]), 1, &[3][..]),
            (grouped3((16, 9, 9), 2, [0; 4]), 2, &[]),
            (
                sliced(grouped3((40, 7, 7), 1, [1, 1, 1, 1]), 3),
                1,
                &[5, 9][..],
            ),
        ];
        // Grouped, unpadded, one 8-channel group on rows of 2 to 20
        // pixels: the row tiles of every size (20: two of 10).
        let mut cases = cases.to_vec();
        cases.extend([4, 5, 7, 8, 9, 12, 22].map(|w| (grouped3((8, 3, w), 1, [0; 4]), 1, &[][..])));
        window_cases(
            "window_convs_on_blocked_inputs_match_the_definition",
            &cases,
        );
    }

    /// Output rows of grouped window convs computed from a ring of their
    /// input rows ([`dnnc_conv_group_ring_nchw8c`], a fused expansion's
    /// kernel) are bitwise the window kernel's on the input tensor, which
    /// `window_run` checks against the definition: strides 1 and 2,
    /// padding on every side, on one side, and none, rows of fewer
    /// pixels than a tile, a 5x5 window, a residual and each activation.
    #[test]
    fn group_ring_rows_are_the_window_kernels_bits() {
        let grouped = |(c, h, w), (k, s), pads| IntoBlockedGeom {
            blocked_input: 1,
            groups: c / 8,
            ..window_geom((c, h, w), c, (k, k), (s, s), pads)
        };
        let cases = [
            (grouped((48, 9, 13), (3, 1), [1, 1, 1, 1]), 2),
            (grouped((24, 11, 10), (3, 2), [1, 1, 1, 1]), 2),
            (grouped((16, 12, 23), (3, 2), [0, 1, 1, 0]), 1),
            (grouped((16, 9, 9), (3, 2), [0; 4]), 1),
            (grouped((16, 5, 4), (3, 1), [1, 1, 1, 1]), 1),
            (grouped((16, 8, 8), (5, 1), [2, 2, 2, 2]), 1),
        ];
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let mut paths = window_paths("group_ring_rows_are_the_window_kernels_bits");
        paths.push(Path::Portable);
        for (g, n) in cases {
            let g = IntoBlockedGeom { n, ..g };
            let c = g.conv;
            let d = WindowCase::new(&g);
            let width = group_ring_width(&c);
            for &path in &paths {
                for (act, with_res) in [(ACT_NONE, false), (ACT_NONE, true), (ACT_SILU, false)] {
                    let want = window_run(&g, n, act, with_res, &[], path);
                    let ep = d.ep(with_res, act);
                    let mut y = vec![f32::NAN; want.len()];
                    for u in 0..n * c.oh {
                        let (img, oy) = (u / c.oh, u % c.oh);
                        // The ring as a fused expansion leaves it: the
                        // window's rows in slots `iy % kh`, zeros around.
                        let mut ring = vec![0f32; group_ring_floats(&c)];
                        let mut slots = vec![c.kh; c.kh];
                        for (ky, slot) in slots.iter_mut().enumerate() {
                            let iy = (oy * c.sh + ky) as isize - c.pt as isize;
                            if iy < 0 || iy as usize >= c.h {
                                continue;
                            }
                            *slot = iy as usize % c.kh;
                            for cb in 0..c.c / 8 {
                                let src = ((img * c.c / 8 + cb) * c.h + iy as usize) * c.w * 8;
                                let dst = ((cb * (c.kh + 1) + *slot) * width + c.pl) * 8;
                                ring[dst..dst + c.w * 8]
                                    .copy_from_slice(&d.xin[src..src + c.w * 8]);
                            }
                        }
                        let rc = unsafe {
                            group_ring_row(
                                d.packed.as_ptr(),
                                ring.as_ptr(),
                                slots.as_ptr(),
                                y.as_mut_ptr(),
                                &g,
                                u,
                                &ep,
                                path,
                            )
                        };
                        assert_eq!(rc, 0, "{g:?} row {u}");
                    }
                    assert_eq!(bits(&want), bits(&y), "{g:?} act {act} {path:?}");
                }
            }
        }
    }

    /// The ring kernel refuses what it does not compute instead of
    /// reading out of bounds: an ungrouped conv, a row past the last, a
    /// slot past the zero row.
    #[test]
    fn group_ring_rows_refuse_bad_calls() {
        let g = IntoBlockedGeom {
            blocked_input: 1,
            groups: 2,
            ..window_geom((16, 6, 6), 16, (3, 3), (1, 1), [1, 1, 1, 1])
        };
        let ring = vec![0f32; group_ring_floats(&g.conv)];
        let w = vec![0f32; 16 * 72];
        let mut y = vec![0f32; 16 * 36];
        let call = |g: &IntoBlockedGeom, u: usize, slots: [usize; 3], y: &mut [f32]| unsafe {
            dnnc_conv_group_ring_nchw8c(
                w.as_ptr(),
                ring.as_ptr(),
                slots.as_ptr(),
                y.as_mut_ptr(),
                g,
                u,
                std::ptr::null(),
            )
        };
        assert_eq!(call(&g, 5, [3, 0, 1], &mut y), 0);
        assert_eq!(call(&g, 6, [0, 1, 2], &mut y), 1, "row past the last");
        assert_eq!(call(&g, 0, [0, 4, 2], &mut y), 1, "slot past the zero row");
        let dense = IntoBlockedGeom { groups: 1, ..g };
        assert_eq!(call(&dense, 0, [0, 1, 2], &mut y), 1, "not grouped");
    }

    /// Runs `dnnc_conv_gather_nchw8c` on `n` images of `g` (blocked
    /// input), the pixels split at `split` and the panels at `panels`,
    /// on `path`; checks it against the definition and returns the
    /// result.
    fn gather_run(
        g: &IntoBlockedGeom,
        n: usize,
        (act, with_res): (u32, bool),
        (split, panels): (&[usize], &[usize]),
        path: Path,
    ) -> Vec<f32> {
        let g = &IntoBlockedGeom { n, ..*g };
        let c = g.conv;
        let d = WindowCase::new(g);
        let ep = d.ep(with_res, act);
        let mut y = vec![f32::NAN; d.res.len()];
        let bounds = |inner: &[usize], end: usize| {
            let mut b = vec![0];
            b.extend_from_slice(inner);
            b.push(end);
            b
        };
        let (qs, ns) = (
            bounds(split, n * c.oh * c.ow),
            bounds(panels, panel_count(g.m)),
        );
        for q in qs.windows(2) {
            for pn in ns.windows(2) {
                let (w, x) = (d.packed.as_ptr(), d.xin.as_ptr());
                let rc = unsafe {
                    gathered(
                        w,
                        x,
                        y.as_mut_ptr(),
                        g,
                        (q[0], q[1]),
                        (pn[0], pn[1]),
                        &ep,
                        path,
                    )
                };
                assert_eq!(rc, 0);
            }
        }
        d.check(g, &y, with_res, act);
        // The window kernel on the same data gives the same bits.
        let mut by_rows = vec![f32::NAN; y.len()];
        let (w, x) = (d.packed.as_ptr(), d.xin.as_ptr());
        let rc = unsafe { into_blocked(w, x, by_rows.as_mut_ptr(), g, (0, n * c.oh), &ep, path) };
        assert_eq!(rc, 0);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&y),
            bits(&by_rows),
            "{g:?} act {act}: not the window kernel's bits"
        );
        y
    }

    #[test]
    fn gathered_convs_match_the_definition() {
        let test = "gathered_convs_match_the_definition";
        let paths = window_paths(test);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        let blocked = |g: IntoBlockedGeom| IntoBlockedGeom {
            blocked_input: 1,
            ..g
        };
        let cases: [(IntoBlockedGeom, usize, &[usize], &[usize]); 4] = [
            // A stride-2 projection: the whole map one piece, the pixels
            // split mid-image, the panels (24 wide, then 16) split too.
            (
                blocked(window_geom((32, 9, 9), 56, (1, 1), (2, 2), [0; 4])),
                2,
                &[7, 30],
                &[1],
            ),
            // 512 channels in over 225 pixels: L1-sized pieces of 15
            // pixels, split across images.
            (
                blocked(window_geom((512, 29, 29), 16, (1, 1), (2, 2), [0; 4])),
                2,
                &[100, 231],
                &[],
            ),
            // Strides 2 and 3, padding: rows and columns in the padding
            // (bias only).
            (
                blocked(window_geom((8, 5, 11), 40, (1, 1), (2, 3), [1, 2, 1, 0])),
                3,
                &[13],
                &[2],
            ),
            // One output pixel per image.
            (
                blocked(window_geom((16, 3, 3), 8, (1, 1), (3, 3), [0; 4])),
                3,
                &[1],
                &[],
            ),
        ];
        for (g, n, split, panels) in cases {
            assert!(gather_unfit(&IntoBlockedGeom { n, ..g }).is_none());
            for mode in [
                (ACT_NONE, false),
                (ACT_NONE, true),
                (ACT_SILU, false),
                (ACT_SIGMOID, true),
            ] {
                let portable = gather_run(&g, n, mode, (split, panels), Path::Portable);
                for &path in &paths {
                    let fast = gather_run(&g, n, mode, (split, panels), path);
                    assert_eq!(
                        bits(&portable),
                        bits(&fast),
                        "{g:?} {mode:?}: {path:?} differs from the portable path"
                    );
                }
            }
        }
        // The second case runs in several pieces.
        let g = cases[1].0.conv;
        assert!(gather_piece_pixels(g.oh * g.ow, 512, 16) < g.oh * g.ow);
    }

    #[test]
    fn gathered_conv_refuses_what_it_does_not_compute() {
        let good = IntoBlockedGeom {
            blocked_input: 1,
            ..window_geom((16, 6, 6), 16, (1, 1), (2, 2), [0; 4])
        };
        let (w, x) = (vec![0f32; 16 * 16], vec![0f32; 16 * 36]);
        let mut y = vec![0f32; 16 * 9];
        let run = |g: &IntoBlockedGeom, (q0, q1), (n0, n1), y: &mut [f32]| unsafe {
            dnnc_conv_gather_nchw8c(
                w.as_ptr(),
                x.as_ptr(),
                y.as_mut_ptr(),
                g,
                q0,
                q1,
                n0,
                n1,
                std::ptr::null(),
            )
        };
        for bad in [
            IntoBlockedGeom {
                blocked_input: 0,
                ..good
            },
            IntoBlockedGeom { groups: 2, ..good },
            IntoBlockedGeom { m: 12, ..good },
            // A window of more than one tap.
            IntoBlockedGeom {
                conv: Group8Geom {
                    kh: 3,
                    kw: 3,
                    oh: 2,
                    ow: 2,
                    ..good.conv
                },
                ..good
            },
        ] {
            assert!(gather_unfit(&bad).is_some(), "{bad:?}");
            assert_eq!(run(&bad, (0, 1), (0, 1), &mut y), 1, "{bad:?}");
        }
        assert!(gather_unfit(&good).is_none());
        // Pixels past the last (9) and panels past the last (1).
        assert_eq!(run(&good, (0, 10), (0, 1), &mut y), 1);
        assert_eq!(run(&good, (0, 9), (0, 2), &mut y), 1);
        assert_eq!(run(&good, (0, 9), (0, 1), &mut y), 0);
    }

    #[test]
    fn window_groups_fill_the_most_accumulators() {
        // 8-pixel rows: 3 panels x 8 pixels; 7: 3 x 7; rows of 35 and
        // 149 tie at 24 accumulators with smaller groups and keep 4.
        for (ow, g) in [(8, 3), (7, 3), (17, 4), (35, 4), (149, 4), (6, 4), (1, 4)] {
            assert_eq!(window_group(ow), g, "rows of {ow}");
        }
    }

    #[test]
    fn window_conv_into_blocks_refuses_what_it_does_not_compute() {
        let good = window_geom((3, 8, 8), 16, (3, 3), (1, 1), [1, 1, 1, 1]);
        let mut y = vec![0f32; 16 * 64];
        let x = vec![0f32; 3 * 64];
        let w = vec![0f32; 16 * 27];
        for bad in [
            IntoBlockedGeom { m: 12, ..good },
            // Three channels cannot be blocked.
            IntoBlockedGeom {
                blocked_input: 1,
                ..good
            },
            IntoBlockedGeom {
                blocked_input: 2,
                ..good
            },
            IntoBlockedGeom { slices: 0, ..good },
            // 16 channels are one panel.
            IntoBlockedGeom { slices: 2, ..good },
            IntoBlockedGeom { n: 0, ..good },
            IntoBlockedGeom {
                conv: Group8Geom { sw: 0, ..good.conv },
                ..good
            },
            IntoBlockedGeom { groups: 0, ..good },
            // Grouped: a plain input, 3 groups of 16 channels over 48 in.
            IntoBlockedGeom { groups: 2, ..good },
            IntoBlockedGeom {
                conv: Group8Geom { c: 48, ..good.conv },
                m: 48,
                blocked_input: 1,
                groups: 3,
                ..good
            },
        ] {
            assert!(into_unfit(&bad).is_some(), "{bad:?}");
            let rc = unsafe {
                dnnc_conv_into_nchw8c(
                    w.as_ptr(),
                    x.as_ptr(),
                    y.as_mut_ptr(),
                    &bad,
                    0,
                    1,
                    std::ptr::null(),
                )
            };
            assert_eq!(rc, 1, "{bad:?}");
        }
        assert!(into_unfit(&good).is_none());
        // Units past the last (8 rows, one slice) are refused too.
        let past = unsafe {
            dnnc_conv_into_nchw8c(
                w.as_ptr(),
                x.as_ptr(),
                y.as_mut_ptr(),
                &good,
                7,
                9,
                std::ptr::null(),
            )
        };
        assert_eq!(past, 1);
    }
}
