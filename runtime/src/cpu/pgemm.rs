//! GEMM with the A operand (a weight) packed once, at compile time.
//!
//! [`dnnc_sgemm`](super::native::dnnc_sgemm) re-packs both operands on
//! every call; for convolution filters and fully-connected weights the A
//! operand never changes, so [`pack_a`] lays it out once in the
//! micro-kernel's panel order and [`dnnc_sgemm_packed`] only packs the
//! activation operand B per call.
//!
//! B is packed per call into 64-byte aligned thread-local scratch, except
//! that a row-major B feeding at most [`Kernel::direct_b_panels`] A panels
//! (8 with AVX-512, 32 with AVX2) is read in place (full-width panels; a
//! partial last one is still packed).
//!
//! An optional fused [`Epilogue`] (`C = clamp(A·B + bias + R, lo, hi)`:
//! per-row bias, a residual operand, a Relu/Clip clamp) is applied in
//! registers when each tile's last k block is stored, so a conv or Gemm
//! layer followed by bias, residual add and activation writes its output
//! once instead of reading it back in a separate pass.
//!
//! Packed A: a 64-byte header (magic, kernel id, `MR`, `KC`, `m`, `k`,
//! data length) followed by, for each block of `KC` columns of A and each
//! panel of `MR` rows (the last zero-padded), the `kc x MR` panel stored
//! k-major. The kernel checks the header, so a buffer packed for another
//! kernel or shape is an error code, never wrong results.
//!
//! Micro-kernels (chosen once at run time): AVX-512F `14 x 32`, AVX2+FMA
//! `6 x 16`, and a portable `4 x 8` one. AVX-512 column blocks of at most
//! 16 (all of a small N, the tail of any N) run a narrow `14 x 16` kernel
//! over the same packed A and a 16-wide B panel, instead of the wide one
//! with half its lanes masked. Each C element is the sum over its
//! `KC` blocks, in order, of a register accumulation over the block's k in
//! order; which tile or thread computes it does not change that order, so
//! results are bitwise identical at any thread count.

use super::alloc::AlignedBuf;
use super::native::{gemm_chunks, gemm_tasks, threads};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Depth of one k block: a `KC x NR` B micro-panel (32 KiB with AVX-512)
/// plus a `KC x MR` A panel stay in L1.
pub const KC: usize = 256;

/// Columns of B packed at once: a `KC x NC` block (1 MiB) stays in L2
/// while every A panel of the block streams past it.
const NC: usize = 1024;

/// The row stride of B (floats, 4 KiB) from which [`Gemm::run`] reading
/// B in place copies each full column strip to L1 scratch before several
/// A panels read it: below it, several of the strip's rows share a page.
const COPY_STRIP_MIN_RS: isize = 1024;

/// The least `k` for which B read in place goes strip by strip through
/// the A panels (`Gemm::run_direct`) instead of panel by panel: with
/// SqueezeNet's fire3 squeeze (16 x 64 x 3025) and expand1x1 (64 x 16 x
/// 3025) the strip order measured slower (73 -> 100 us; 41 -> 95 us at 2
/// threads), with k of 128 and more faster (fire4 squeeze 32 x 128 x
/// 3025, fire6-8 squeezes over 729 columns: 5-10%).
pub const STRIP_ORDER_MIN_K: usize = 128;

/// Most A panels (AVX-512, 14 rows each) for which a GEMM whose B is
/// gathered ([`Gather`]) goes strip by strip below [`STRIP_ORDER_MIN_K`]
/// too, each strip that lies in one segment read in place through its
/// rows' offsets, so a strided conv's columns are never written (see
/// [`gathered_strips`]). Stems with k = 27, 1 thread: MobileNet-V2's 32
/// rows (3 panels) 0.217 → 0.200 ms, ShuffleNet-V2's 24 (2 panels) 0.173
/// → 0.162; SqueezeNet's 64 (5 panels) 0.373 → 0.446, each strip's tiles
/// then writing to 64 rows of C at once.
pub const GATHER_STRIP_MAX_PANELS: usize = 3;

/// Most A panels for which a gathered GEMM whose C stays in cache (a
/// conv computing into a band scratch that its max pool reads, as the
/// code generator's pooled convs do) goes strip by strip: each strip's
/// tiles then write `m` rows of a scratch that L1 and L2 hold, where
/// [`GATHER_STRIP_MAX_PANELS`] keeps C's rows in memory few. SqueezeNet's
/// pooled stem (k = 27 over 64 rows, 5 panels), `dnnc bench` on the stem
/// alone: 0.545 → 0.52 ms at one thread, 0.303 → 0.293 at two (the
/// written columns and their copies gone).
pub const GATHER_STRIP_MAX_PANELS_CACHED_C: usize = 8;

/// Whether an `m x n x k` GEMM with a gathered B, its A packed for
/// `kern`, goes strip by strip (strips read in place where they can)
/// rather than packing B: from [`STRIP_ORDER_MIN_K`], or with at most
/// `max_panels` AVX-512 panels ([`GATHER_STRIP_MAX_PANELS`], or
/// [`GATHER_STRIP_MAX_PANELS_CACHED_C`] for a C in cache). The code
/// generator asks this to decide whether to gather B at all, and passes
/// `max_panels` in the [`Gather`].
pub fn gathered_strips(kern: Kernel, m: usize, k: usize, max_panels: usize) -> bool {
    k >= STRIP_ORDER_MIN_K || (kern == Kernel::Avx512 && m.div_ceil(kern.mr()) <= max_panels)
}

/// Most columns of a last, partial column tile that the AVX2 kernel
/// computes a column at a time over several A panels
/// (`x86::tail_cols_avx2`) instead of through the `6 x 8` half tile, whose
/// cost does not shrink below 8 columns: a 7x7 map's 49 columns (and
/// 17x17's 289) leave one. 1280 x 49 x 320 (MobileNet-V2's last
/// pointwise conv, hot): the one-column tile took an eighth of the GEMM.
const TAIL_COLS: usize = 2;

/// Header length in f32 slots (64 bytes, so panels stay 64-byte aligned).
const HEADER: usize = 16;

/// Identifies a packed-A buffer.
const MAGIC: u64 = 0x646e_6e63_5041_434b;

/// A micro-kernel family, which fixes the packed-A layout (`MR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Plain Rust, any target: `4 x 8`.
    Portable,
    /// x86-64 AVX2 + FMA: `6 x 16` (two ymm per row).
    Avx2,
    /// x86-64 AVX-512F: `14 x 32` (two zmm per row, 28 accumulators).
    Avx512,
}

impl Kernel {
    /// Rows of C per micro-tile (rows of a packed A panel).
    pub fn mr(self) -> usize {
        match self {
            Kernel::Portable => 4,
            Kernel::Avx2 => 6,
            Kernel::Avx512 => 14,
        }
    }

    /// Columns of C per micro-tile (width of a packed B panel).
    pub fn nr(self) -> usize {
        match self {
            Kernel::Portable => 8,
            Kernel::Avx2 => 16,
            Kernel::Avx512 => 32,
        }
    }

    /// Most A panels for which [`dnnc_sgemm_packed`] reads a row-major B
    /// in place instead of packing it: each packed B panel would serve
    /// only this many tiles. AVX-512 (14-row panels), measured on the
    /// Xeon with MobileNet-V2's pointwise convs (1 thread): 15-30% faster
    /// with `m` = 16 to 32 over 3136 to 12544 columns, ~10% with `m` = 64
    /// and 96 over 196 to 784; with many more panels packing wins (rows
    /// of B thousands of floats apart defeat the TLB and prefetchers once
    /// the packing is amortised). AVX2 (6-row panels), on AMD EPYC with B
    /// just read (`WARM=1 pgemm_shapes`, medians of 3): in place up to 32
    /// panels measured 0-9% faster on every shape tried, e.g. 96 x 12544 x
    /// 16 1452 -> 1376 us, 64 x 196 x 384 311 -> 288, 192 x 784 x 32 315 ->
    /// 302, 64 x 3136 x 576 7.32 -> 6.77 ms, and with B out of cache 128 x
    /// 784 x 256 1603 -> 1466 us, 96 x 784 x 192 940 -> 848; at 64 and 96
    /// panels 3% slower (384 x 196 x 64, 576 x 196 x 96). Models at one
    /// thread (6 alternating profiles, kernel sums): MobileNet-V2 0.991,
    /// GoogLeNet 0.981, SqueezeNet 0.985, ShuffleNet-V2 0.991, ResNet-18
    /// 0.986 (its 64-channel Winograd GEMMs 7% faster).
    pub fn direct_b_panels(self) -> usize {
        match self {
            Kernel::Avx2 => 32,
            _ => 8,
        }
    }

    /// Rows of A (vector lanes) per [`Layout::Lanes`] panel of this
    /// kernel's lanes kernel: [`LANES`] (two zmm) for AVX-512,
    /// [`LANES_AVX2`] (three ymm) for AVX2; 0 where there is none.
    pub fn lanes(self) -> usize {
        match self {
            Kernel::Portable => 0,
            Kernel::Avx2 => LANES_AVX2,
            Kernel::Avx512 => LANES,
        }
    }

    /// The kernel a [`Layout::Lanes`] buffer is packed for: the best
    /// one, or the AVX-512 one where that has no lanes kernel (such a
    /// buffer then is refused at run time, as on any machine without
    /// the kernel).
    fn lanes_kernel() -> Kernel {
        match Kernel::best() {
            Kernel::Portable => Kernel::Avx512,
            kern => kern,
        }
    }

    fn id(self) -> u64 {
        match self {
            Kernel::Portable => 1,
            Kernel::Avx2 => 2,
            Kernel::Avx512 => 3,
        }
    }

    fn from_id(id: u64) -> Option<Kernel> {
        match id {
            1 => Some(Kernel::Portable),
            2 => Some(Kernel::Avx2),
            3 => Some(Kernel::Avx512),
            _ => None,
        }
    }

    /// Whether this machine can run the kernel.
    pub fn supported(self) -> bool {
        match self {
            Kernel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => dnnc_ir::isa::cpu_isa() >= dnnc_ir::isa::CpuIsa::Avx2,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => dnnc_ir::isa::cpu_isa() >= dnnc_ir::isa::CpuIsa::Avx512,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The fastest kernel this machine runs (detected once).
    pub fn best() -> Kernel {
        static BEST: OnceLock<Kernel> = OnceLock::new();
        *BEST.get_or_init(|| {
            [Kernel::Avx512, Kernel::Avx2]
                .into_iter()
                .find(|k| k.supported())
                .unwrap_or(Kernel::Portable)
        })
    }
}

/// Whether AVX-512 column blocks of at most 16 use the narrow kernel.
static NARROW: AtomicBool = AtomicBool::new(true);

/// Enables (the default) or disables the narrow AVX-512 `14 x 16` kernel
/// for column blocks of width <= 16, so benchmarks and tests can compare
/// it with the masked wide kernel. Results are bitwise identical either
/// way (both accumulate each element over k in the same order).
pub fn set_narrow(on: bool) {
    NARROW.store(on, Ordering::Relaxed);
}

/// Row stride of the packed B panel for a column block of width `w`:
/// 16 when the narrow AVX-512 kernel computes the block, else `NR`.
#[inline]
fn panel_ld(kern: Kernel, narrow: bool, w: usize) -> usize {
    if narrow && kern == Kernel::Avx512 && w <= 16 {
        16
    } else {
        kern.nr()
    }
}

/// Most 16-column strips a block of B may have for [`Gemm::pack_b`] to
/// pack it row by row (see there).
const ROW_ORDER_MAX_STRIPS: usize = 16;

/// Floats of packed data (after the header) for an `m x k` A.
fn packed_len(kern: Kernel, m: usize, k: usize) -> usize {
    m.div_ceil(kern.mr()) * kern.mr() * k
}

/// Bytes of a buffer [`pack_a`] makes for an `m x k` A (header included).
pub fn packed_bytes(m: usize, k: usize) -> usize {
    (HEADER + packed_len(Kernel::best(), m, k)) * 4
}

/// How a packed A is laid out, which fixes how the GEMM reads it.
///
/// With [`Layout::Panels`] the micro-kernel's vector lanes run along C's
/// columns (B's columns, a conv's output pixels): a 7x7 map's 49 columns
/// fill 32 + 16 + 16 lanes, one of them with a single live lane. With
/// [`Layout::Lanes`] they run along C's rows (A's rows, a conv's output
/// channels), 32 at a time, and each C column is one broadcast, so 49
/// columns cost 49 rows of a `14 x 32` tile with no lane idle; each tile
/// is transposed as it is stored. That is how onnxruntime's blocked
/// (NCHWc) kernels avoid the waste, without changing the tensors' layout.
/// [`Layout::choose`] picks per GEMM shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `MR`-row panels, k-major (the micro-kernel of [`Kernel::best`]).
    Panels,
    /// [`Kernel::lanes`]-row panels, k-major over the whole of k, read
    /// by a lanes kernel: AVX-512's C tiles of [`LANES`] rows by up to
    /// [`LANE_COLS`] columns, AVX2's of [`LANES_AVX2`] rows by up to
    /// [`LANE_COLS_AVX2`] columns.
    Lanes,
}

/// The share (percent) of the panels kernel's FMA issue slots that the
/// lanes kernel must stay under ([`Layout::choose_cold`]) when B is
/// deeper than [`KC`] and comes from beyond L2: a lanes tile walks its
/// whole k reading one strided row of B per step, while the panels path
/// packs B in `KC`-deep blocks that stay in L1 (its packing reads B's
/// rows as long runs). Inception-v3's 17x17 pointwise convs at batch 8
/// (192 x 289 x 768 per image, 4% fewer slots with lanes; 7 MB of
/// input): 4.9 ms with lanes, 3.8 with panels. With B in L2 lanes still
/// wins at that margin (MobileNet-V2's 96 x 196 x 576: the whole model
/// 5.03 -> 5.33 ms with panels).
const LANES_COLD_MARGIN: usize = 85;

/// Rows of A (lanes) per [`Layout::Lanes`] panel: two zmm registers.
pub const LANES: usize = 32;

/// Columns of C (broadcast B elements) per [`Layout::Lanes`] tile.
pub const LANE_COLS: usize = 14;

/// Rows of A (lanes) per AVX2 [`Layout::Lanes`] panel: three ymm
/// registers.
pub const LANES_AVX2: usize = 24;

/// Columns of C per AVX2 [`Layout::Lanes`] tile: its 4 x 3 accumulators,
/// three A vectors and a broadcast fill the 16 ymm registers.
pub const LANE_COLS_AVX2: usize = 4;

/// Most columns for which the AVX2 kernel takes [`Layout::Lanes`]: up to
/// 8 the panels tile (6 x 16) fills one ymm per row, 6 FMA chains where
/// its FMA latency (4 cycles at 2 a cycle) wants 8, and a lanes tile
/// keeps 12. The fully-connected layers at batch 8 ran at 46-52% of the
/// core's peak in panels.
pub const LANES_AVX2_MAX_N: usize = 8;

/// The cost of storing one transposed [`Layout::Lanes`] tile, in zmm FMA
/// issue slots, calibrated on hot GEMMs (`LAYOUT=lanes pgemm_shapes`,
/// GFLOP/s panels vs lanes): it must exceed ~110 for 384 x 196 x 64 (180
/// vs 177) and ~70 for 256 x 169 x 64 (188 vs 173) to keep panels, and
/// stay below ~165 for 576 x 196 x 96 (184 vs 189) and ~220 for 128 x
/// 196 x 128 (182 vs 202) to take lanes. (The slot counts leave out the
/// panels kernel's own per-tile costs, hence a figure below the store's
/// ~128 shuffle cycles.)
const LANE_STORE_COST: usize = 128;

/// Column strips of the lanes kernel over `n` columns in segments of
/// `seg_len` (`n` itself when B is not gathered): `(count, per_segment)`,
/// strip `s` described by [`lane_strip`].
fn lane_strips(n: usize, seg_len: usize, tile_cols: usize) -> (usize, usize) {
    if paired(n, seg_len, tile_cols) {
        return (n.div_ceil(2 * PAIRED_SEG), 1);
    }
    let per = seg_len.div_ceil(tile_cols);
    (n.div_ceil(seg_len) * per, per)
}

/// Segments of this many columns (a 7x7 map's output rows) are read two
/// to a lanes tile, so its 14 columns span a pair of them: with one
/// segment a tile (7 columns), the gathered 512 x 49 x 2304 GEMM of
/// ResNet-18's layer4.0 conv1 ran at 162 GFLOP/s hot where a row-major
/// B ran at 195.
const PAIRED_SEG: usize = 7;

/// Whether lanes tiles of `tile_cols` columns take segments of
/// [`PAIRED_SEG`] two at a time (AVX-512's 14-column tiles).
fn paired(n: usize, seg_len: usize, tile_cols: usize) -> bool {
    seg_len == PAIRED_SEG && n > seg_len && tile_cols >= 2 * PAIRED_SEG
}

/// Strip `s` of [`lane_strips`]: its first segment, its first column
/// within that segment, its width (0 past the end of a partial last
/// segment), and whether it spans a pair of segments.
fn lane_strip(
    s: usize,
    n: usize,
    seg_len: usize,
    (per, tile_cols): (usize, usize),
) -> (usize, usize, usize, bool) {
    if paired(n, seg_len, tile_cols) {
        let w = (2 * PAIRED_SEG).min(n - 2 * PAIRED_SEG * s);
        return (2 * s, 0, w, w > PAIRED_SEG);
    }
    let (seg, q) = (s / per, s % per);
    let j = q * tile_cols;
    let w = tile_cols
        .min(seg_len - j)
        .min(n.saturating_sub(seg * seg_len + j));
    (seg, j, w, false)
}

impl Layout {
    /// The layout whose kernel issues fewer vector FMAs for an `m x n x
    /// k` GEMM whose B is a row-major matrix read as it is (not gathered):
    /// [`Layout::Lanes`] when it takes 2% fewer FMA issue slots than the
    /// [`Layout::Panels`] kernel, its tile stores counted (SqueezeNet's
    /// 1000 x 169 x 512 classifier, 0.7% fewer, ran 0.84 → 0.88 ms in the
    /// model with lanes).
    /// Both sum each element's products in the same order, so the choice
    /// never changes results. With the AVX2 kernel: lanes for 2 to
    /// [`LANES_AVX2_MAX_N`] columns.
    pub fn choose(m: usize, n: usize, k: usize) -> Layout {
        Layout::choose_segments(m, n, k, n)
    }

    /// [`Layout::choose`] for a row-major B that streams from beyond L2
    /// (a conv input larger than L2, as at batch 8): lanes only when it
    /// saves over 15% of the panels kernel's FMA slots
    /// (`LANES_COLD_MARGIN`) for `k` past one k block.
    pub fn choose_cold(m: usize, n: usize, k: usize) -> Layout {
        let hot = Layout::choose(m, n, k);
        if hot != Layout::Lanes || k <= KC || n == 1 || Kernel::best() != Kernel::Avx512 {
            return hot;
        }
        let (panels, lanes) = fma_slots(m, n, k, n);
        if lanes * 100 < panels * LANES_COLD_MARGIN {
            Layout::Lanes
        } else {
            Layout::Panels
        }
    }

    /// [`Layout::choose`] for a B gathered in segments of `seg_len`
    /// columns ([`Gather`]): a lanes tile then never crosses a segment,
    /// so each segment has its own tiles (a 7x7 map's rows of 7 columns:
    /// tiles of 7, twice as many stores).
    pub fn choose_segments(m: usize, n: usize, k: usize, seg_len: usize) -> Layout {
        if Kernel::best() == Kernel::Avx2 && m > 0 && k > 0 && seg_len >= n {
            return if (2..=LANES_AVX2_MAX_N).contains(&n) {
                Layout::Lanes
            } else {
                Layout::Panels
            };
        }
        if Kernel::best() != Kernel::Avx512 || n == 0 || m == 0 || k == 0 || seg_len == 0 {
            return Layout::Panels;
        }
        if n == 1 {
            // A matrix-vector product streams A once either way: lanes
            // (whole 128-byte rows per k, aligned) unless its padding to
            // 32 rows streams over 5% more than the panels' to 14. A
            // fully-connected layer at batch 1, 1000 x 1280 (cold): 220 →
            // 179 µs.
            let (l, p) = (m.div_ceil(LANES) * LANES, m.div_ceil(14) * 14);
            return if l * 100 <= p * 105 {
                Layout::Lanes
            } else {
                Layout::Panels
            };
        }
        let (panels, lanes) = fma_slots(m, n, k, seg_len);
        if lanes * 50 < panels * 49 {
            Layout::Lanes
        } else {
            Layout::Panels
        }
    }

    fn id(self) -> u64 {
        match self {
            Layout::Panels => 0,
            Layout::Lanes => 1,
        }
    }
}

/// The zmm FMA issue slots per k step of an `m x n x k` GEMM (B in
/// segments of `seg_len` columns) in each layout: `(panels, lanes)`.
/// Panels: each panel's rows (rounded up to even) times the zmm per row
/// its column tiles take (32 wide: 2, a tail of up to 16: 1, else 2).
/// Lanes: two zmm per column per 32-row panel, plus the tile stores.
fn fma_slots(m: usize, n: usize, k: usize, seg_len: usize) -> (usize, usize) {
    let rows = m / 14 * 14 + (m % 14).next_multiple_of(2);
    let tail = match n % 32 {
        0 => 0,
        1..=16 => 1,
        _ => 2,
    };
    let panels = rows * (2 * (n / 32) + tail);
    let tiles = m.div_ceil(LANES) * lane_strips(n, seg_len, LANE_COLS).0;
    let lanes = m.div_ceil(LANES) * 2 * n + tiles * LANE_STORE_COST / k;
    (panels, lanes)
}

/// Bytes of a buffer [`pack_a_for`] makes for an `m x k` A in `layout`
/// (header included).
pub fn packed_bytes_for(layout: Layout, m: usize, k: usize) -> usize {
    match layout {
        Layout::Panels => packed_bytes(m, k),
        Layout::Lanes => {
            let lanes = Kernel::lanes_kernel().lanes();
            (HEADER + m.div_ceil(lanes) * lanes * k) * 4
        }
    }
}

/// [`pack_a`] in `layout` ([`Layout::Lanes`] is packed for the best
/// kernel's lanes kernel, AVX-512's or AVX2's; a call on a machine
/// without it returns the mismatch error code).
pub fn pack_a_for(
    layout: Layout,
    m: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    alpha: f32,
) -> AlignedBuf {
    if layout == Layout::Panels {
        return pack_a(m, k, a, a_rs, a_cs, alpha);
    }
    pack_lanes_with(Kernel::lanes_kernel(), m, k, a, a_rs, a_cs, alpha)
}

/// [`pack_a_for`] in [`Layout::Lanes`] for a given kernel's lanes kernel
/// (tests compare the AVX2 one with its panels kernel on an AVX-512
/// machine); `kern` must have one ([`Kernel::lanes`] > 0).
pub fn pack_lanes_with(
    kern: Kernel,
    m: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    alpha: f32,
) -> AlignedBuf {
    let lanes = kern.lanes();
    assert!(lanes > 0, "the {kern:?} kernel has no lanes layout");
    let len = m.div_ceil(lanes) * lanes * k;
    let mut buf = packed_buf(kern, lanes, (m, k), len, Layout::Lanes);
    let data = &mut buf.as_bytes_mut()[HEADER * 4..];
    for p in 0..m.div_ceil(lanes) {
        for kk in 0..k {
            for l in 0..lanes.min(m - p * lanes) {
                let v = alpha * a[(p * lanes + l) * a_rs + kk * a_cs];
                let o = ((p * k + kk) * lanes + l) * 4;
                data[o..o + 4].copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    buf
}

/// A zeroed packed-A buffer of `len` floats after its header: the magic,
/// the kernel, its rows per panel, `KC`, `m`, `k`, `len` and the layout,
/// which every call checks against its GEMM.
fn packed_buf(
    kern: Kernel,
    rows: usize,
    (m, k): (usize, usize),
    len: usize,
    layout: Layout,
) -> AlignedBuf {
    let mut buf = AlignedBuf::zeroed((HEADER + len) * 4);
    let hdr = [
        MAGIC,
        kern.id(),
        rows as u64,
        KC as u64,
        m as u64,
        k as u64,
        len as u64,
        layout.id(),
    ];
    for (d, v) in buf.as_bytes_mut().chunks_exact_mut(8).zip(hdr) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
    buf
}

/// Packs `alpha * A` (`m x k`, element `(i, j)` at `a[i*a_rs + j*a_cs]`)
/// for [`Kernel::best`]: done once per weight at compile time.
pub fn pack_a(m: usize, k: usize, a: &[f32], a_rs: usize, a_cs: usize, alpha: f32) -> AlignedBuf {
    pack_a_with(Kernel::best(), m, k, a, a_rs, a_cs, alpha)
}

/// [`pack_a`] for a given kernel (tests and benchmarks force the AVX2 and
/// portable paths with it; running needs [`Kernel::supported`]).
pub fn pack_a_with(
    kern: Kernel,
    m: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    alpha: f32,
) -> AlignedBuf {
    let mr = kern.mr();
    let len = packed_len(kern, m, k);
    let mut buf = packed_buf(kern, mr, (m, k), len, Layout::Panels);
    let mut data = vec![0f32; len];
    let mp = m.div_ceil(mr) * mr;
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        for p in 0..m.div_ceil(mr) {
            let base = k0 * mp + p * kc * mr;
            for kk in 0..kc {
                for r in 0..mr {
                    let i = p * mr + r;
                    if i < m {
                        data[base + kk * mr + r] = alpha * a[i * a_rs + (k0 + kk) * a_cs];
                    }
                }
            }
        }
    }
    for (d, v) in buf.as_bytes_mut()[HEADER * 4..]
        .chunks_exact_mut(4)
        .zip(data)
    {
        d.copy_from_slice(&v.to_ne_bytes());
    }
    buf
}

/// The fused epilogue of [`dnnc_sgemm_packed`]: `C = clamp(A·B + bias +
/// R)`, in that order, each step optional. Built by generated code on its
/// stack and passed by pointer, so the call's signature stays that of the
/// plain GEMM.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Epilogue {
    /// Per-row bias (`m` floats, added to every column of row `i`), or null.
    pub bias: *const f32,
    /// Residual R (`m x n`, element `(i, j)` at `res[i*res_rs + j*res_cs]`),
    /// or null. It must not overlap C unless `k <= KC` (C then is written
    /// once per element, right after R's element is read).
    pub res: *const f32,
    /// Row stride of R in elements.
    pub res_rs: isize,
    /// Column stride of R in elements.
    pub res_cs: isize,
    /// Lower clamp bound (`-inf`: none; Relu: 0).
    pub lo: f32,
    /// Upper clamp bound (`+inf`: none).
    pub hi: f32,
    /// Activation after the clamp: [`ACT_NONE`], [`ACT_SIGMOID`],
    /// [`ACT_SILU`] or [`ACT_GELU`] (the packed GEMM refuses another:
    /// [`act_supported`]).
    pub act: u32,
    /// A transform of B's rows applied as B is packed (inactive:
    /// [`Prologue::NONE`]).
    pub pro: Prologue,
}

impl Epilogue {
    /// No bias, no residual, no clamp, no activation and no prologue:
    /// callers set the parts they use (`Epilogue { bias, ..Epilogue::NONE }`).
    pub const NONE: Epilogue = Epilogue {
        bias: std::ptr::null(),
        res: std::ptr::null(),
        res_rs: 0,
        res_cs: 0,
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
        act: ACT_NONE,
        pro: Prologue::NONE,
    };
}

/// A per-row transform of B applied as the GEMM packs it: row `kk` (a
/// 1x1 conv's input channel) becomes `min(hi, max(lo, B[kk, j] *
/// scale[kk] + shift[kk]))`, the product rounded before the add. That is
/// an inference BatchNormalization (`scale = gamma / sqrt(var + eps)`,
/// `shift = beta - mean * scale`, as the generated elementwise kernel
/// computes it) and a Relu/Clip in front of a 1x1 conv, DenseNet's
/// pre-activation: fused so, their result is never written and read
/// back. Only the panels layout packs every B element (a call with an
/// active prologue and a lanes-packed A or `n = 1` returns the mismatch
/// code, C untouched); a gathered B is transformed as it is packed, as
/// DenseNet's pre-activation of a Concat read in place is
/// (`dnnc_sgemm_packed_gather`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Prologue {
    /// Per-row scale (`k` floats), or null: no prologue.
    pub scale: *const f32,
    /// Per-row shift (`k` floats).
    pub shift: *const f32,
    /// Lower clamp bound (`-inf`: none; Relu: 0).
    pub lo: f32,
    /// Upper clamp bound (`+inf`: none).
    pub hi: f32,
}

impl Prologue {
    /// No transform.
    pub const NONE: Prologue = Prologue {
        scale: std::ptr::null(),
        shift: std::ptr::null(),
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
    };

    fn active(&self) -> bool {
        !self.scale.is_null()
    }

    /// Transforms the `w` leading floats of `kc` rows `ld` apart at
    /// `d`, row `kk` being B's row `k0 + kk` (the padding stays zero).
    unsafe fn apply(&self, d: *mut f32, ld: usize, (k0, kc): (usize, usize), w: usize) {
        #[cfg(target_arch = "x86_64")]
        if Kernel::Avx512.supported() {
            x86::prologue_rows_avx512(self, d, ld, (k0, kc), w);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if Kernel::Avx2.supported() {
            x86::prologue_rows_avx2(self, d, ld, (k0, kc), w);
            return;
        }
        for kk in 0..kc {
            let (a, b) = (*self.scale.add(k0 + kk), *self.shift.add(k0 + kk));
            let row = d.add(kk * ld);
            for jj in 0..w {
                *row.add(jj) = clamp_keep_nan(*row.add(jj) * a + b, self.lo, self.hi);
            }
        }
    }
}

/// [`Epilogue::act`]: no activation.
pub const ACT_NONE: u32 = 0;
/// [`Epilogue::act`]: `sigmoid(v)` ([`sigmoid`]).
pub const ACT_SIGMOID: u32 = 1;
/// [`Epilogue::act`]: `v * sigmoid(v)` (SiLU, EfficientNet's activation).
pub const ACT_SILU: u32 = 2;
/// [`Epilogue::act`]: GELU as the exporters write it, `(v * (erf(v /
/// sqrt 2) + 1)) * 0.5` ([`gelu`]: the code generator's `erf`, operation
/// for operation; `gelu8` and `gelu16` in the vector stores).
pub const ACT_GELU: u32 = 3;

/// Whether the packed GEMM applies activation `act`: every kernel and
/// layout applies each `ACT_*` (the vector stores with `sigmoid8/16` and
/// `gelu8/16`, the scalar ones with the same operations); a call asking
/// for any other value is refused (error 1), never run without it.
pub fn act_supported(act: u32) -> bool {
    act <= ACT_GELU
}

/// The constants of the code generator's f32x4 `exp` and `erf`
/// (`codegen::cpu::math`), which [`gelu`] and the AVX2 `gelu8` repeat
/// operation for operation; one definition for both.
#[allow(missing_docs)]
pub mod erf {
    /// `exp`'s clamp bounds of its argument.
    pub const EXP_HI: f32 = 88.722_84;
    pub const EXP_LO: f32 = -103.972_08;
    /// `ln 2` in two parts (`exp`'s range reduction).
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// `erf`'s Maclaurin series in `x^2` for `|x| <` [`SMALL`], Horner
    /// order, times `2/sqrt(pi) x`.
    pub const SERIES: [f32; 7] = [
        1.0 / 9360.0,
        -1.0 / 1320.0,
        1.0 / 216.0,
        -1.0 / 42.0,
        1.0 / 10.0,
        -1.0 / 3.0,
        1.0,
    ];
    /// Abramowitz-Stegun 7.1.26: `t = 1 / (1 + T |x|)` and its polynomial.
    pub const T: f32 = 0.327_591_1;
    pub const AS: [f32; 5] = [
        1.061_405_4,
        -1.453_152_1,
        1.421_413_8,
        -0.284_496_74,
        0.254_829_6,
    ];
    /// Below this `|x|` the series, above it A&S.
    pub const SMALL: f32 = 0.75;
}

/// Horner `c[0] x^(n-1) + ... + c[n-1]`, a rounded multiply then a
/// rounded add per step (the code generator's `poly`).
#[inline(always)]
fn horner(x: f32, c: &[f32]) -> f32 {
    let mut acc = c[0];
    for &k in &c[1..] {
        acc = acc * x + k;
    }
    acc
}

/// The code generator's f32x4 `exp`, one lane (non-NaN `x`; a NaN never
/// reaches it from [`erf_exact`]'s result).
#[inline(always)]
fn exp_exact(x: f32) -> f32 {
    let xc = x.clamp(erf::EXP_LO, erf::EXP_HI);
    let n = (xc * std::f32::consts::LOG2_E).round_ties_even();
    let r = xc - n * erf::LN2_HI;
    let r = r - n * erf::LN2_LO;
    let p = horner(r, &sig::P);
    let p = p * (r * r);
    let p = p + r;
    let p = p + 1.0;
    let ni = n as i32;
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let p1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let p2 = f32::from_bits(((n2 + 127) as u32) << 23);
    let y = p * p1 * p2;
    if x > erf::EXP_HI {
        f32::INFINITY
    } else {
        y
    }
}

/// The code generator's f32x4 `erf`, one lane.
#[inline(always)]
fn erf_exact(x: f32) -> f32 {
    let ax = x.abs();
    let z = x * x;
    let p = horner(z, &erf::SERIES) * std::f32::consts::FRAC_2_SQRT_PI;
    let small = p * x;
    let t = 1.0 / (ax * erf::T + 1.0);
    let q = horner(t, &erf::AS) * t;
    let q = q * exp_exact(-z);
    let big = f32::from_bits((1.0 - q).to_bits() | (x.to_bits() & 0x8000_0000));
    let r = if ax < erf::SMALL { small } else { big };
    if x.is_nan() {
        x
    } else {
        r
    }
}

/// GELU ([`ACT_GELU`]): `(v * (erf(v / sqrt 2) + 1)) * 0.5`, bitwise the
/// generated elementwise code for the exported
/// `Div(sqrt 2) -> Erf -> Add(1) -> Mul(v) -> Mul(0.5)` chain.
#[inline]
pub fn gelu(v: f32) -> f32 {
    v * (erf_exact(v / std::f32::consts::SQRT_2) + 1.0) * 0.5
}

/// The constants of [`sigmoid`]: clamp bounds of `v`, `-log2(e)`, the
/// rounding magic `1.5 * 2^23 + 127`, the two-part `ln 2` and the
/// polynomial `P` of `(e^r - 1 - r) / r^2` on `|r| <= ln(2)/2` (Cephes
/// `expf`; [`sig::Q`] is it in `-r`). Public so the code generator's f32x4
/// sigmoid uses the very same numbers.
#[allow(missing_docs)]
pub mod sig {
    pub const LO: f32 = -88.0;
    pub const HI: f32 = 87.0;
    pub const NLOG2E: f32 = -std::f32::consts::LOG2_E;
    pub const MAGIC: f32 = 12_583_039.0;
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    pub const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
    /// `P` with its odd powers' signs flipped: `Q(s) = P(-s)`.
    pub const Q: [f32; 6] = [-P[0], P[1], -P[2], P[3], -P[4], P[5]];
}

/// Logistic sigmoid `1 / (1 + e^-v)`, NaN propagating: the same sequence
/// of IEEE operations (fused multiply-adds included) as the vector
/// versions in the x86 kernels and as the code generator's f32x4
/// `sigmoid`, so every path gives bitwise the same result. `v` is
/// clamped to `[-88, 87]` (beyond, sigmoid is within 1e-38 of 0 or 1);
/// `e^-v = 2^n e^r` with `n = round(-v log2 e)` from one add of `1.5 *
/// 2^23 + 127`, whose float's bits shifted left by 23 are then `2^n`'s,
/// and `s = -r = v + n ln 2` (two parts), so no operation negates `v`:
/// `e^r = 1 - s + s^2 Q(s)`.
///
/// Its multiply-adds are exact fused ones in every build (`f32::mul_add`):
/// compiled without the `fma` target feature each is a call to the
/// software `fmaf`, so where the CPU has FMA the same code runs compiled
/// with it (`sigmoid_fma`), bitwise the same. The scalar epilogues
/// (partial and strided GEMM tiles, depthwise row tails) spent over half
/// of a squeeze-excitation conv's time in `fmaf`: RegNetY-400MF's
/// 110 -> 440 with Sigmoid at batch 8, 119 -> 34 us.
#[inline]
pub fn sigmoid(v: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA.
        return unsafe { sigmoid_fma(v) };
    }
    sigmoid_exact(v)
}

/// [`sigmoid`] compiled with hardware FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn sigmoid_fma(v: f32) -> f32 {
    sigmoid_exact(v)
}

/// [`sigmoid`]'s operations, inlined into each build of it.
#[inline(always)]
fn sigmoid_exact(v: f32) -> f32 {
    let x = if v > sig::LO { v } else { sig::LO };
    let x = if x < sig::HI { x } else { sig::HI };
    let y = x.mul_add(sig::NLOG2E, sig::MAGIC);
    let n = y - sig::MAGIC;
    let s = n.mul_add(sig::LN2_HI, x);
    let s = n.mul_add(sig::LN2_LO, s);
    let mut p = sig::Q[0];
    for &k in &sig::Q[1..] {
        p = p.mul_add(s, k);
    }
    let q = p.mul_add(s * s, 1.0) - s;
    let scale = f32::from_bits(y.to_bits() << 23);
    let e = 1.0 / q.mul_add(scale, 1.0);
    if v.is_nan() {
        v
    } else {
        e
    }
}

/// `v` through activation `act` ([`Epilogue::act`]).
#[inline]
pub(crate) fn activate(act: u32, v: f32) -> f32 {
    match act {
        ACT_SIGMOID => sigmoid(v),
        ACT_SILU => v * sigmoid(v),
        ACT_GELU => gelu(v),
        _ => v,
    }
}

/// One tile's view of an [`Epilogue`]: bias and R already offset to the
/// tile's first row and column.
#[derive(Clone, Copy)]
struct TileEp {
    bias: *const f32,
    res: *const f32,
    res_rs: isize,
    res_cs: isize,
    lo: f32,
    hi: f32,
    clamp: bool,
    act: u32,
}

impl TileEp {
    /// The epilogue of element `(r, j)` of the tile applied to `v`; the
    /// clamp keeps NaN as the interpreter's Relu/Clip do.
    #[inline(always)]
    unsafe fn apply(&self, r: usize, j: usize, mut v: f32) -> f32 {
        if !self.bias.is_null() {
            v += *self.bias.add(r);
        }
        if !self.res.is_null() {
            v += *self
                .res
                .offset(r as isize * self.res_rs + j as isize * self.res_cs);
        }
        if self.clamp {
            v = clamp_keep_nan(v, self.lo, self.hi);
        }
        activate(self.act, v)
    }
}

/// `v` clamped to `[lo, hi]`, a NaN staying NaN: the scalar form of the
/// vector kernels' `min(hi, max(lo, v))`.
#[inline(always)]
fn clamp_keep_nan(v: f32, lo: f32, hi: f32) -> f32 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// A B operand gathered from rows of another buffer instead of stored as
/// a matrix: element `(k, j)` is `base[row_off[k] + (j / seg_len) *
/// seg_step + j % seg_len]`, each B row a run of `seg_len`-float segments
/// `seg_step` apart. An implicit im2col: a strided conv's columns are
/// such runs of its padded (phase-split) input rows, so the GEMM packs
/// them straight from the input and the column matrix is never written.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Gather {
    /// The buffer the rows are read from.
    pub base: *const f32,
    /// Element offset from `base` of each of the `k` rows' first segment.
    pub row_off: *const i64,
    /// Columns per segment (at least 1).
    pub seg_len: usize,
    /// Elements from one segment of a row to the next.
    pub seg_step: isize,
    /// The `max_panels` of [`gathered_strips`] for this GEMM.
    pub strip_panels: usize,
}

/// [`dnnc_sgemm_packed`] with B described by a [`Gather`] (`b`), which
/// every B panel is packed from, so results are bitwise those of the same
/// B stored as a row-major matrix. Returns 0, 1 as [`dnnc_sgemm_packed`],
/// or 2 for a `seg_len` of 0.
///
/// # Safety
/// As [`dnnc_sgemm_packed`]; `b` must point to a [`Gather`] whose `k`
/// offsets and segments address readable floats for every column `< n`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_sgemm_packed_gather(
    ap: *const f32,
    m: usize,
    n: usize,
    k: usize,
    b: *const Gather,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    ep: usize,
) -> i32 {
    let g = b.read();
    if g.seg_len == 0 {
        return 2;
    }
    packed_call(ap, (m, n, k), (g.base, 0, 1, Some(g)), (c, c_rs, c_cs), ep)
}

/// `C = A · B` (or `C += A · B` when `ep == 1`, or `C = epilogue(A · B)`
/// when `ep` is the address of an [`Epilogue`]) with A packed by
/// [`pack_a`]: `A: m x k`, `B: k x n`, `C: m x n`, B and C addressed by row
/// and column strides in elements (transposes are swapped strides).
/// Returns 0, or 1 when the packed buffer does not describe an `m x k` A
/// for a kernel this machine runs (C is then untouched). Unless `ep == 1`
/// the old C is not read.
///
/// Inside [`with_threads`](super::native::with_threads) the work is split
/// over column or row panels of C as `dnnc_sgemm` does; results are
/// bitwise identical to one thread.
///
/// # Safety
/// `ap` must point to a buffer made by [`pack_a`] (at least its 64-byte
/// header readable), B and C must address matrices of the given sizes and
/// strides, C must not overlap A or B, and an `ep` other than 0 or 1 must
/// point to an [`Epilogue`] whose operands are valid for `m x n`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_sgemm_packed(
    ap: *const f32,
    m: usize,
    n: usize,
    k: usize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    ep: usize,
) -> i32 {
    packed_call(ap, (m, n, k), (b, b_rs, b_cs, None), (c, c_rs, c_cs), ep)
}

/// The body of [`dnnc_sgemm_packed`] and [`dnnc_sgemm_packed_gather`]: B
/// as strides or gathered.
#[allow(clippy::type_complexity)]
unsafe fn packed_call(
    ap: *const f32,
    (m, n, k): (usize, usize, usize),
    (b, b_rs, b_cs, gather): (*const f32, isize, isize, Option<Gather>),
    (c, c_rs, c_cs): (*mut f32, isize, isize),
    ep: usize,
) -> i32 {
    let h = |i: usize| (ap as *const u64).add(i).read();
    let act = if ep > 1 {
        (ep as *const Epilogue).read().act
    } else {
        ACT_NONE
    };
    if h(0) == MAGIC && h(7) == Layout::Lanes.id() {
        if !act_supported(act) {
            return 1;
        }
        return lanes_call(ap, (m, n, k), (b, b_rs, b_cs, gather), (c, c_rs, c_cs), ep);
    }
    let kern = match Kernel::from_id(h(1)) {
        Some(kn) if h(0) == MAGIC && kn.supported() && act_supported(act) => kn,
        _ => return 1,
    };
    if h(2) != kern.mr() as u64
        || h(3) != KC as u64
        || h(4) != m as u64
        || h(5) != k as u64
        || h(6) != packed_len(kern, m, k) as u64
        || h(7) != Layout::Panels.id()
    {
        return 1;
    }
    if m == 0 || n == 0 {
        return 0;
    }
    let acc = ep == 1;
    let ep = (ep > 1).then(|| (ep as *const Epilogue).read());
    let pro = ep.map(|e| e.pro).filter(Prologue::active);
    if pro.is_some() && n == 1 {
        return 1;
    }
    if k == 0 {
        if !acc {
            let te = ep.map(|e| tile_ep(&e, 0, 0));
            for i in 0..m {
                for j in 0..n {
                    let v = te.map_or(0.0, |t| t.apply(i, j, 0.0));
                    *c.offset(i as isize * c_rs + j as isize * c_cs) = v;
                }
            }
        }
        return 0;
    }
    let g = Gemm {
        kern,
        a: ap.add(HEADER),
        m,
        k,
        b,
        b_rs,
        b_cs,
        c,
        c_rs,
        c_cs,
        acc,
        ep,
        pro,
        gemv: n == 1 && gather.is_none(),
        gather,
    };
    let (mr, nr) = (kern.mr(), kern.nr());
    let panels = m.div_ceil(mr);
    let tasks = gemm_tasks(m, n, k, threads());
    if tasks <= 1 {
        g.run(0..panels, 0..n);
        return 0;
    }
    // Split the dimension with more micro-tiles into `tasks` slices of
    // whole tiles, balanced by rows or columns rather than tiles (the
    // last tile is usually partial). Column slices are cut into chunks
    // ([`gemm_chunks`]); row slices only for a matrix-vector product: a
    // row chunk of a wider B packs the B block its share already packed
    // (MobileNet-V2's 960 x 49 x 160 convs: 8 chunks would pack B 8 times
    // instead of 2, an estimated ~5% of the GEMM at the packing's rate).
    let ncols = n.div_ceil(nr);
    let split_m = panels >= ncols;
    let tasks = if split_m && n > 1 {
        tasks
    } else {
        gemm_chunks(m, n, k, tasks)
    };
    let bounds = if split_m {
        balanced_bounds(m, mr, tasks)
    } else {
        balanced_bounds(n, nr, tasks)
    };
    let slice = |i: usize| {
        let (lo, hi) = (bounds[i], bounds[i + 1]);
        // SAFETY: slices write disjoint tiles of C.
        unsafe {
            if split_m {
                g.run(lo / mr..hi.div_ceil(mr), 0..n);
            } else {
                g.run(0..panels, lo..hi);
            }
        }
    };
    super::spin::par_for(bounds.len() - 1, &slice);
    0
}

/// Boundaries `0 = b_0 < b_1 < .. = extent` of at most `tasks` slices of
/// `extent`, each a multiple of `unit` except the end, placed at the
/// multiple nearest an even share: M = 256 in 14-row panels splits
/// 126 + 130 instead of 10 + 9 panels (140 + 116 rows).
fn balanced_bounds(extent: usize, unit: usize, tasks: usize) -> Vec<usize> {
    let mut b = vec![0];
    for i in 1..tasks {
        let share = i * extent / tasks;
        let cut = ((share + unit / 2) / unit * unit).min(extent);
        if cut > *b.last().unwrap_or(&0) && cut < extent {
            b.push(cut);
        }
    }
    b.push(extent);
    b
}

/// The body of [`dnnc_sgemm_packed`] for an A packed in [`Layout::Lanes`]:
/// checks the header, then splits C's tiles over threads by whichever of
/// the row panels or column strips has more (balanced as
/// [`balanced_bounds`]). B is read in place: strided (row-major, or with
/// any column stride: a fully-connected layer's batch rows, its weight
/// the packed A, are B's columns) or gathered, each tile inside one
/// segment.
#[allow(clippy::type_complexity)]
unsafe fn lanes_call(
    ap: *const f32,
    (m, n, k): (usize, usize, usize),
    (b, b_rs, b_cs, gather): (*const f32, isize, isize, Option<Gather>),
    (c, c_rs, c_cs): (*mut f32, isize, isize),
    ep: usize,
) -> i32 {
    let h = |i: usize| (ap as *const u64).add(i).read();
    let kern = match Kernel::from_id(h(1)) {
        Some(kn) if kn.lanes() > 0 && kn.supported() => kn,
        _ => return 1,
    };
    let lanes = kern.lanes();
    let len = m.div_ceil(lanes) * lanes * k;
    if h(2) != lanes as u64
        || h(3) != KC as u64
        || h(4) != m as u64
        || h(5) != k as u64
        || h(6) != len as u64
        || (ep > 1 && (ep as *const Epilogue).read().pro.active())
    {
        return 1;
    }
    if m == 0 || n == 0 {
        return 0;
    }
    let g = Lanes {
        kern,
        a: ap.add(HEADER),
        m,
        n,
        k,
        b,
        b_rs,
        b_cs: if n == 1 { 1 } else { b_cs },
        gather,
        c,
        c_rs,
        c_cs,
        acc: ep == 1,
        ep: (ep > 1).then(|| (ep as *const Epilogue).read()),
    };
    let panels = m.div_ceil(lanes);
    let strips = lane_strips(n, g.seg_len(), g.tile_cols()).0;
    let tasks = gemm_chunks(m, n, k, gemm_tasks(m, n, k, threads()));
    if tasks <= 1 {
        g.run(0..panels, 0..strips);
        return 0;
    }
    let split_m = panels >= strips;
    let bounds = if split_m {
        balanced_bounds(m, lanes, tasks)
    } else {
        balanced_bounds(strips, 1, tasks)
    };
    let slice = |i: usize| {
        let (lo, hi) = (bounds[i], bounds[i + 1]);
        // SAFETY: slices write disjoint tiles of C.
        unsafe {
            if split_m {
                g.run(lo / lanes..hi.div_ceil(lanes), 0..strips);
            } else {
                g.run(0..panels, lo..hi);
            }
        }
    };
    super::spin::par_for(bounds.len() - 1, &slice);
    0
}

/// One validated [`Layout::Lanes`] call's operands.
struct Lanes {
    /// The kernel whose lanes kernel runs (AVX-512 or AVX2).
    kern: Kernel,
    /// Packed data (after the header): panel `p`, row `kk` at
    /// `(p*k + kk) * lanes`.
    a: *const f32,
    m: usize,
    n: usize,
    k: usize,
    b: *const f32,
    b_rs: isize,
    /// B's column stride (1 for a row-major B).
    b_cs: isize,
    /// B gathered from rows of another buffer (`b`, `b_rs`, `b_cs` then
    /// unused).
    gather: Option<Gather>,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    /// `C += A·B` (the tile starts from C's old values).
    acc: bool,
    ep: Option<Epilogue>,
}

// SAFETY: as for `Gemm`: tasks read A and B and write disjoint C tiles.
unsafe impl Sync for Lanes {}

impl Lanes {
    /// Computes the tiles of row panels `panels` by column strips
    /// `strips`, panel by panel, so each panel's A (up to `k * 128`
    /// bytes) is read from memory once and from L2 (AVX-512) or L1
    /// (AVX2, two strips a k block) for its other strips.
    unsafe fn run(&self, panels: std::ops::Range<usize>, strips: std::ops::Range<usize>) {
        let lanes = self.kern.lanes();
        // Strips per segment and columns per tile, once for every tile.
        let cut = (
            lane_strips(self.n, self.seg_len(), self.tile_cols()).1,
            self.tile_cols(),
        );
        for p in panels {
            let i = p * lanes;
            let rows = lanes.min(self.m - i);
            let a = self.a.add(p * self.k * lanes);
            #[cfg(target_arch = "x86_64")]
            if self.kern == Kernel::Avx2 {
                // Two strips at a time, each k block of the panel (24 KiB)
                // read from memory for the first and from L1 for the
                // second.
                let mut held = None;
                for s in strips.clone() {
                    let Some(t) = self.tile(i, s, cut) else {
                        continue;
                    };
                    match held.take() {
                        None => held = Some(t),
                        Some(first) => x86::lanes_group_avx2(
                            self.k,
                            a,
                            (first, Some(t)),
                            rows,
                            (self.c_rs, self.c_cs),
                            self.acc,
                        ),
                    }
                }
                if let Some(first) = held {
                    let cs = (self.c_rs, self.c_cs);
                    x86::lanes_group_avx2(self.k, a, (first, None), rows, cs, self.acc);
                }
                continue;
            }
            for s in strips.clone() {
                let Some(t) = self.tile(i, s, cut) else {
                    continue;
                };
                #[cfg(target_arch = "x86_64")]
                x86::lanes_tile(
                    self.k,
                    a,
                    t.src,
                    t.c,
                    (rows, t.cols),
                    (self.c_rs, self.c_cs),
                    self.acc,
                    t.ep.as_ref(),
                );
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (a, rows, t);
            }
        }
    }

    /// The tile of rows from `i` by strip `s` (its B rows, C, columns
    /// and epilogue), or `None` for a strip past a partial last segment;
    /// `cut`: strips per segment and columns per tile ([`lane_strip`]).
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile(&self, i: usize, s: usize, cut: (usize, usize)) -> Option<x86::LaneTile> {
        let seg_len = self.seg_len();
        let (seg, jj, cols, paired) = lane_strip(s, self.n, seg_len, cut);
        if cols == 0 {
            return None;
        }
        let j = seg * seg_len + jj;
        let c = self
            .c
            .offset(i as isize * self.c_rs + j as isize * self.c_cs);
        let ep = self.ep.as_ref().map(|e| tile_ep(e, i, j));
        let src = match &self.gather {
            Some(g) if paired => x86::LaneRows::TablePair(
                g.base.offset(seg as isize * g.seg_step),
                g.row_off,
                g.seg_step - PAIRED_SEG as isize,
            ),
            Some(g) => x86::LaneRows::Table(
                g.base.offset(seg as isize * g.seg_step + jj as isize),
                g.row_off,
            ),
            None if self.b_cs == 1 => x86::LaneRows::Strided(self.b.add(j), self.b_rs),
            None => x86::LaneRows::StridedCols(
                self.b.offset(j as isize * self.b_cs),
                self.b_rs,
                self.b_cs,
            ),
        };
        Some(x86::LaneTile { src, c, cols, ep })
    }

    /// A placeholder off x86-64, where no lanes kernel runs (a lanes
    /// buffer is refused before any tile).
    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn tile(&self, _i: usize, _s: usize, _cut: (usize, usize)) -> Option<()> {
        None
    }

    /// Columns per segment of B (all `n` when B is not gathered).
    fn seg_len(&self) -> usize {
        self.gather.map_or(self.n, |g| g.seg_len)
    }

    /// Columns per tile of the kernel's lanes kernel.
    fn tile_cols(&self) -> usize {
        if self.kern == Kernel::Avx2 {
            LANE_COLS_AVX2
        } else {
            LANE_COLS
        }
    }
}

/// `count` independent [`dnnc_sgemm_packed`] calls (no epilogue,
/// overwriting C), entry `s` at `ap + s*a_stride`, `b + s*b_stride`,
/// `c + s*c_stride` (in f32 elements; `ap` and `a_stride` address the
/// packed buffers, headers included). Winograd's α² frequency GEMMs are
/// each too small to split on their own, but as a batch they split across
/// threads by whole GEMMs (when `W/p` pays, the same rule as
/// [`gemm_tasks`]), each computed by one thread exactly as it would be
/// alone, so results are bitwise identical at any thread count. Returns
/// the first non-zero return code.
///
/// # Safety
/// As [`dnnc_sgemm_packed`] for every entry; the C blocks must not
/// overlap each other or any A/B.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dnnc_sgemm_packed_batch(
    ap: *const f32,
    a_stride: usize,
    m: usize,
    n: usize,
    k: usize,
    b: *const f32,
    b_stride: usize,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_stride: usize,
    c_rs: isize,
    c_cs: isize,
    count: usize,
) -> i32 {
    let batch = Batch {
        ap,
        a_stride,
        m,
        n,
        k,
        b,
        b_stride,
        b_rs,
        b_cs,
        c,
        c_stride,
        c_rs,
        c_cs,
    };
    let one = |s: usize| batch.one(s);
    // The rule of `gemm_tasks` on the batch's total work (MACs), a task
    // being a run of whole GEMMs.
    let w = (m as u64)
        .saturating_mul(n as u64)
        .saturating_mul(k as u64)
        .saturating_mul(count as u64);
    let by_work = (w / (8 * super::native::handoff())).max(1) as usize;
    let tasks = threads().min(by_work).min(count);
    let tasks = super::native::chunks_for_work(tasks, w, 8, count);
    if tasks <= 1 {
        for s in 0..count {
            let rc = one(s);
            if rc != 0 {
                return rc;
            }
        }
        return 0;
    }
    let rcs: Vec<std::sync::atomic::AtomicI32> = (0..tasks)
        .map(|_| std::sync::atomic::AtomicI32::new(0))
        .collect();
    let slice = |i: usize| {
        // One thread per GEMM inside a task: the split is over the batch.
        super::native::with_threads(1, || {
            for s in i * count / tasks..(i + 1) * count / tasks {
                // Entries address disjoint C blocks (the caller's contract).
                let rc = one(s);
                if rc != 0 {
                    rcs[i].store(rc, Ordering::Relaxed);
                    return;
                }
            }
        })
    };
    super::spin::par_for(tasks, &slice);
    rcs.iter()
        .map(|r| r.load(Ordering::Relaxed))
        .find(|&r| r != 0)
        .unwrap_or(0)
}

/// The operands of one [`dnnc_sgemm_packed_batch`] call, shared by its
/// tasks.
struct Batch {
    ap: *const f32,
    a_stride: usize,
    m: usize,
    n: usize,
    k: usize,
    b: *const f32,
    b_stride: usize,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_stride: usize,
    c_rs: isize,
    c_cs: isize,
}

// SAFETY: tasks only read A and B and write disjoint C blocks, all of which
// outlive the call.
unsafe impl Sync for Batch {}

impl Batch {
    /// Entry `s` of the batch.
    unsafe fn one(&self, s: usize) -> i32 {
        dnnc_sgemm_packed(
            self.ap.add(s * self.a_stride),
            self.m,
            self.n,
            self.k,
            self.b.add(s * self.b_stride),
            self.b_rs,
            self.b_cs,
            self.c.add(s * self.c_stride),
            self.c_rs,
            self.c_cs,
            0,
        )
    }
}

/// `ep` seen from the tile whose first element is `(i, j)` of C.
#[inline]
unsafe fn tile_ep(ep: &Epilogue, i: usize, j: usize) -> TileEp {
    TileEp {
        bias: if ep.bias.is_null() {
            ep.bias
        } else {
            ep.bias.add(i)
        },
        res: if ep.res.is_null() {
            ep.res
        } else {
            ep.res
                .offset(i as isize * ep.res_rs + j as isize * ep.res_cs)
        },
        res_rs: ep.res_rs,
        res_cs: ep.res_cs,
        lo: ep.lo,
        hi: ep.hi,
        clamp: ep.lo > f32::NEG_INFINITY || ep.hi < f32::INFINITY,
        act: ep.act,
    }
}

/// One validated call's operands.
struct Gemm {
    kern: Kernel,
    /// Packed data (after the header).
    a: *const f32,
    m: usize,
    k: usize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
    c_cs: isize,
    acc: bool,
    /// The fused epilogue, applied at each tile's last k block.
    ep: Option<Epilogue>,
    /// B's row transform, applied as B is packed (every B then is).
    pro: Option<Prologue>,
    /// `n == 1`: every column goes through the GEMV path, whatever the
    /// split.
    gemv: bool,
    /// B gathered from rows of another buffer (`b`, `b_rs`, `b_cs` then
    /// unused): every panel is packed, none read in place.
    gather: Option<Gather>,
}

// SAFETY: tasks of one call only read A and B and write disjoint tiles of
// C, all of which outlive the scope.
unsafe impl Sync for Gemm {}

thread_local! {
    /// Per-thread B packing scratch (grown on demand, never shrunk).
    static BPACK: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl Gemm {
    /// Computes the tiles of A panels `panels` by C columns `cols`.
    unsafe fn run(&self, panels: std::ops::Range<usize>, cols: std::ops::Range<usize>) {
        let (mr, nr) = (self.kern.mr(), self.kern.nr());
        let mp = self.m.div_ceil(mr) * mr;
        if self.gemv {
            self.gemv(panels, cols.start);
            return;
        }
        let narrow = NARROW.load(Ordering::Relaxed);
        // With few A panels, packing B costs about as much as the tiles
        // that read it: full-width panels of a row-major B are then read
        // in place (see `Kernel::direct_b_panels`).
        let few = panels.len() <= self.kern.direct_b_panels() && self.pro.is_none();
        let direct = self.gather.is_none() && self.b_cs == 1 && self.b_rs > 0 && few;
        // A gathered B is copied (or read in place) strip by strip in the
        // same order.
        let strips = if self.gather.is_some() {
            let most = self
                .gather
                .map_or(GATHER_STRIP_MAX_PANELS, |g| g.strip_panels);
            few && gathered_strips(self.kern, self.m, self.k, most)
        } else {
            direct && self.k >= STRIP_ORDER_MIN_K
        };
        if strips {
            self.run_direct(panels, cols, narrow);
            return;
        }
        BPACK.with(|s| {
            let mut s = s.borrow_mut();
            let need = KC * NC.min(cols.len()).div_ceil(nr) * nr + 16;
            if s.len() < need {
                s.resize(need, 0.0);
            }
            // 64-byte aligned start inside the scratch.
            let off = s.as_ptr().align_offset(64).min(16);
            let bp = s.as_mut_ptr().add(off);
            for jc in cols.clone().step_by(NC) {
                let nc = NC.min(cols.end - jc);
                let npn = nc.div_ceil(nr);
                for k0 in (0..self.k).step_by(KC) {
                    let kc = KC.min(self.k - k0);
                    // B is always packed: reading full-width panels of a
                    // row-major B in place measured slower on most shapes
                    // (512^3: 157 vs 175 GFLOP/s, 64x3136x576: 99 vs 126;
                    // rows thousands of floats apart defeat the TLB and
                    // prefetchers), faster only on narrow ones.
                    if direct {
                        // Only a partial last panel is packed (the kernel
                        // reads whole `nr`-wide rows).
                        if !nc.is_multiple_of(nr) {
                            let jt = jc + (npn - 1) * nr;
                            let d = bp.add((npn - 1) * kc * nr);
                            self.pack_b(d, k0, kc, jt, jc + nc - jt, nr, narrow);
                        }
                    } else {
                        self.pack_b(bp, k0, kc, jc, nc, nr, narrow);
                    }
                    let first = k0 == 0 && !self.acc;
                    let last = k0 + kc == self.k;
                    let ablk = self.a.add(k0 * mp);
                    // A narrow last tile goes through the column kernel,
                    // all panels at once, after the others.
                    let jt = jc + (npn - 1) * nr;
                    let tail = self.column_tail(nr.min(cols.end - jt));
                    // Each A panel (L1) meets every B panel of the block
                    // (L2), so A streams from memory once per block.
                    for p in panels.clone() {
                        let rows = mr.min(self.m - p * mr);
                        let strip = self.strip_tiles(
                            (k0, kc),
                            ablk.add(p * kc * mr),
                            p,
                            jc,
                            (nc / nr).min(npn - usize::from(tail)),
                            if direct {
                                let o = k0 as isize * self.b_rs + jc as isize;
                                (self.b.offset(o), self.b_rs as usize, nr)
                            } else {
                                (bp as *const f32, nr, kc * nr)
                            },
                        );
                        for jp in strip..npn - usize::from(tail) {
                            let j = jc + jp * nr;
                            let ncols = nr.min(cols.end - j);
                            let (bpan, ld) = if direct && ncols == nr {
                                let o = k0 as isize * self.b_rs + j as isize;
                                (self.b.offset(o), self.b_rs as usize)
                            } else {
                                let ld = panel_ld(self.kern, narrow, ncols);
                                (bp.add(jp * kc * nr) as *const f32, ld)
                            };
                            let cp = self
                                .c
                                .offset((p * mr) as isize * self.c_rs + j as isize * self.c_cs);
                            let te = match &self.ep {
                                Some(ep) if last => Some(tile_ep(ep, p * mr, j)),
                                _ => None,
                            };
                            // The row's next tile, a tile's time ahead.
                            if k0 == 0 && jp + 1 < npn - usize::from(tail) {
                                self.hint_c_tile(p, j + nr);
                            }
                            micro(
                                self.kern,
                                kc,
                                ablk.add(p * kc * mr),
                                (bpan, ld),
                                cp,
                                (rows, ncols),
                                (self.c_rs, self.c_cs),
                                first,
                                te.as_ref(),
                            );
                        }
                    }
                    if tail {
                        let w = cols.end - jt;
                        let bpan = bp.add((npn - 1) * kc * nr) as *const f32;
                        let b = (bpan, panel_ld(self.kern, narrow, w));
                        self.tail_tiles((k0, kc), panels.clone(), b, jt, w);
                    }
                }
            }
        });
    }

    /// [`Gemm::run`] for a row-major B and few A panels (see
    /// [`Kernel::direct_b_panels`]): one `nr`-wide column strip at a time, its k
    /// blocks in order, each meeting all (L2-resident) A panels while the
    /// strip's block is in L1 and its C tiles stay in cache between k
    /// blocks. A full strip is copied to L1 scratch when more than one
    /// panel reads it and B's rows are far apart ([`Gemm::copy_strip`],
    /// `COPY_STRIP_MIN_RS`), else read in place; a
    /// partial last strip is packed (the kernel reads whole rows). Each
    /// tile's k blocks run in the same order as in any other schedule, so
    /// results are bitwise those of [`Gemm::run`]'s packed path.
    unsafe fn run_direct(
        &self,
        panels: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        narrow: bool,
    ) {
        let (mr, nr) = (self.kern.mr(), self.kern.nr());
        let mp = self.m.div_ceil(mr) * mr;
        // Copy full strips when several panels read them and B's rows lie
        // on different pages (see `copy_strip`; with rows closer, as
        // MobileNet-V2's 96 x 576 x 196, the copy measured slower: 160 vs
        // 148 us).
        let copy = self.gather.is_some() || (panels.len() > 2 && self.b_rs >= COPY_STRIP_MIN_RS);
        BPACK.with(|s| {
            let mut s = s.borrow_mut();
            let need = KC * nr + 16;
            if s.len() < need {
                s.resize(need, 0.0);
            }
            let off = s.as_ptr().align_offset(64).min(16);
            let bp = s.as_mut_ptr().add(off);
            for j in cols.clone().step_by(nr) {
                let ncols = nr.min(cols.end - j);
                // A gathered strip inside one segment is read in place
                // through its rows' offsets (AVX-512): its first element.
                let tab = self
                    .gather
                    .as_ref()
                    .filter(|g| {
                        self.kern == Kernel::Avx512
                            && ncols == nr
                            && j % g.seg_len + nr <= g.seg_len
                    })
                    .map(|g| {
                        let seg = (j / g.seg_len) as isize * g.seg_step;
                        (g.base.offset(seg + (j % g.seg_len) as isize), g.row_off)
                    });
                for k0 in (0..self.k).step_by(KC) {
                    let kc = KC.min(self.k - k0);
                    if let Some((base, offs)) = tab {
                        self.strip_tab((base, offs.add(k0)), (k0, kc), j, panels.clone());
                        continue;
                    }
                    let (bpan, ld) = if ncols == nr && !copy {
                        let o = k0 as isize * self.b_rs + j as isize;
                        (self.b.offset(o), self.b_rs as usize)
                    } else if ncols == nr {
                        self.copy_strip(bp, k0, kc, j);
                        (bp as *const f32, nr)
                    } else {
                        self.pack_b(bp, k0, kc, j, ncols, nr, narrow);
                        (bp as *const f32, panel_ld(self.kern, narrow, ncols))
                    };
                    if self.column_tail(ncols) {
                        self.tail_tiles((k0, kc), panels.clone(), (bpan, ld), j, ncols);
                        continue;
                    }
                    let first = k0 == 0 && !self.acc;
                    let last = k0 + kc == self.k;
                    let ablk = self.a.add(k0 * mp);
                    // AVX2, B read in place: the next strip's rows are
                    // prefetched into L2 between this strip's tiles (see
                    // `prefetch_next_strip`; the AVX-512 kernel prefetches
                    // B itself).
                    let pf = self.kern == Kernel::Avx2
                        && ncols == nr
                        && !copy
                        && self.gather.is_none()
                        && j + 2 * nr <= cols.end
                        && panels.len() >= 2;
                    let np = panels.len();
                    // AVX-512, a copied strip: the block copied next (this
                    // strip's next k block, else the next strip's first),
                    // when full, streams in during this block's tiles
                    // (`LineWalk::share`).
                    let next = (self.kern == Kernel::Avx512
                        && ncols == nr
                        && copy
                        && self.gather.is_none())
                    .then(|| self.next_copied_block(j, k0 + kc, cols.end))
                    .flatten();
                    // AVX2: the strip's whole-panel tiles in one call.
                    let done = self.column_tiles(
                        (k0, kc),
                        ablk,
                        panels.clone(),
                        (bpan, ld),
                        (j, ncols),
                        (pf, k0 == 0 && j + nr < cols.end),
                    );
                    for (q, p) in panels.clone().enumerate().skip(done) {
                        if pf && q + 1 < np {
                            let rows = (kc * q / (np - 1), kc * (q + 1) / (np - 1));
                            self.prefetch_next_strip(bpan, rows);
                        }
                        let cp = self
                            .c
                            .offset((p * mr) as isize * self.c_rs + j as isize * self.c_cs);
                        let te = match &self.ep {
                            Some(ep) if last => Some(tile_ep(ep, p * mr, j)),
                            _ => None,
                        };
                        // Its tile in the next strip, a strip's time ahead.
                        if k0 == 0 && j + nr < cols.end {
                            self.hint_c_tile(p, j + nr);
                        }
                        #[cfg(target_arch = "x86_64")]
                        if let Some(walk) = next
                            .and_then(|(nx, rows)| x86::LineWalk::share(nx, self.b_rs, rows, q, kc))
                        {
                            x86::micro_avx512_streamed(
                                kc,
                                ablk.add(p * kc * mr),
                                bpan,
                                walk,
                                cp,
                                (mr.min(self.m - p * mr), ncols),
                                (self.c_rs, self.c_cs),
                                first,
                                te.as_ref(),
                            );
                            continue;
                        }
                        micro(
                            self.kern,
                            kc,
                            ablk.add(p * kc * mr),
                            (bpan, ld),
                            cp,
                            (mr.min(self.m - p * mr), ncols),
                            (self.c_rs, self.c_cs),
                            first,
                            te.as_ref(),
                        );
                    }
                }
            }
        });
    }

    /// Hints for writing the lines of the C tile of panel `p` at column
    /// `j` that a later micro-kernel call stores first (row-major C): a
    /// conv's output at batch 8 is in memory, and each tile's stores
    /// otherwise wait for their lines to be read (see "GEMM micro-kernel
    /// choice" in docs/cpu-backend.md). Not for the AVX2 kernel's GEMMs of k
    /// < 32, whose `6 x 16` tiles compute too briefly to pay for the hints
    /// when C is in cache (96 x 12544 x 16 with C in L3: 5% slower).
    #[inline]
    unsafe fn hint_c_tile(&self, p: usize, j: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            // Floats to a tile row's last line (its 32 or 16 columns).
            let last = match self.kern {
                Kernel::Avx512 => 16,
                Kernel::Avx2 if self.k >= 32 => 15,
                _ => return,
            };
            if self.c_cs != 1 {
                return;
            }
            let mr = self.kern.mr();
            let rows = mr.min(self.m - p * mr);
            let cp = self
                .c
                .wrapping_offset((p * mr) as isize * self.c_rs + j as isize);
            x86::hint_rows::<true>(cp, self.c_rs, rows, 2, |l| last * l);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, j);
    }

    /// The block that [`Gemm::run_direct`] copies after the one at column
    /// `j` whose k block ends at row `k_end`: the same strip's next k
    /// block, else the next full strip's first; where it starts in B and
    /// its rows.
    fn next_copied_block(
        &self,
        j: usize,
        k_end: usize,
        col_end: usize,
    ) -> Option<(*const f32, usize)> {
        let nr = self.kern.nr();
        if k_end < self.k {
            let at = k_end as isize * self.b_rs + j as isize;
            Some((self.b.wrapping_offset(at), KC.min(self.k - k_end)))
        } else if j + 2 * nr <= col_end {
            Some((self.b.wrapping_add(j + nr), KC.min(self.k)))
        } else {
            None
        }
    }

    /// Prefetches into L2 rows `r0..r1` of the strip after the one at
    /// `bpan` (a strip of B read in place, rows `b_rs` apart): before each
    /// of a strip's tiles but the last, its share of the next strip's rows,
    /// so the first tile of the next strip finds them (the current strip's
    /// first tile pulls its own rows in; the others read them from L1).
    /// Rows a page apart defeat the hardware prefetchers: GoogLeNet's 1x1
    /// reduce convs, whose input comes from memory by the time the fourth
    /// branch reads it (AMD EPYC, `pgemm_shapes` 16 x 784 x 192 with B
    /// swept from cache 290 -> 253 us, with B just read 147 -> 148;
    /// GoogLeNet's nine five-by-five branch reduce convs 1.87 -> 1.75 ms,
    /// medians of 8 alternating profiles; whole models within noise:
    /// GoogLeNet 0.990 and 1.002 of before in two runs of 8, MobileNet-V2,
    /// SqueezeNet and ShuffleNet-V2 0.998-1.005).
    #[inline]
    unsafe fn prefetch_next_strip(&self, bpan: *const f32, (r0, r1): (usize, usize)) {
        #[cfg(target_arch = "x86_64")]
        for kk in r0..r1 {
            let a = bpan.offset(kk as isize * self.b_rs + self.kern.nr() as isize);
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(a as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (bpan, r0, r1);
    }

    /// The tiles of A panels `panels` by the full strip at column `j` of a
    /// gathered B read in place (`tb`: the strip's base and its rows'
    /// offsets from `k0`), for k block `(k0, kc)`.
    unsafe fn strip_tab(
        &self,
        tb: (*const f32, *const i64),
        (k0, kc): (usize, usize),
        j: usize,
        panels: std::ops::Range<usize>,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            let (mr, nr) = (self.kern.mr(), self.kern.nr());
            let mp = self.m.div_ceil(mr) * mr;
            let first = k0 == 0 && !self.acc;
            let last = k0 + kc == self.k;
            let ablk = self.a.add(k0 * mp);
            for p in panels {
                let cp = self
                    .c
                    .offset((p * mr) as isize * self.c_rs + j as isize * self.c_cs);
                let te = match &self.ep {
                    Some(ep) if last => Some(tile_ep(ep, p * mr, j)),
                    _ => None,
                };
                x86::micro_avx512_tab(
                    kc,
                    ablk.add(p * kc * mr),
                    tb,
                    cp,
                    (mr.min(self.m - p * mr), nr),
                    (self.c_rs, self.c_cs),
                    first,
                    te.as_ref(),
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (tb, k0, kc, j, panels);
    }

    /// Copies the full-width strip `B[k0..k0+kc, j..j+NR]` of a row-major
    /// B to `dst` (rows NR apart) with whole-row vector moves. Several A
    /// panels then read it from L1 contiguously; read in place, each of
    /// its `kc` rows lies on another page: a TLB and an L1 miss per row
    /// and panel (SqueezeNet's 32 x 128 x 3025 squeeze, 1 thread: 270 ->
    /// 247 us).
    #[inline]
    unsafe fn copy_strip(&self, dst: *mut f32, k0: usize, kc: usize, j: usize) {
        if let Some(g) = &self.gather {
            let nr = self.kern.nr();
            self.pack_gather(g, dst, nr, k0, kc, j, nr);
            return;
        }
        let src = self.b.offset(k0 as isize * self.b_rs + j as isize);
        match self.kern {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => x86::copy_rows_avx512(src, self.b_rs, dst, kc),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => x86::copy_rows_avx2(src, self.b_rs, dst, kc),
            _ => {
                let nr = self.kern.nr();
                for kk in 0..kc {
                    let row = src.offset(kk as isize * self.b_rs);
                    std::ptr::copy_nonoverlapping(row, dst.add(kk * nr), nr);
                }
            }
        }
    }

    /// Packs `B[k0..k0+kc, j0..j0+nc]` into k-major panels `nr` apart,
    /// each [`panel_ld`] wide, zero-padding the last.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pack_b(
        &self,
        dst: *mut f32,
        k0: usize,
        kc: usize,
        j0: usize,
        nc: usize,
        nr: usize,
        narrow: bool,
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.kern == Kernel::Avx2
            && self.gather.is_none()
            && self.b_cs == 1
            && nc.div_ceil(nr) <= ROW_ORDER_MAX_STRIPS
        {
            // Row by row across the strips: each row of B read in order,
            // where strip by strip reads 64 bytes of each row at a time
            // (AMD EPYC, `pgemm_shapes`, 3 alternating pairs each: 208 x
            // 196 x 208 520-534 -> 508-511 us, 672 x 196 x 112 905-914 ->
            // 892-905). Across many strips (96 x 3136 x 576, 196 of them
            // per block) the writes to as many streams measured ~1%
            // slower, so wide blocks keep the strip order.
            for kk in 0..kc {
                let src = self.b.offset((k0 + kk) as isize * self.b_rs + j0 as isize);
                x86::pack_row_strips_avx2(src, dst.add(kk * nr), kc * nr, nc);
            }
            if let Some(p) = &self.pro {
                for jp in 0..nc.div_ceil(nr) {
                    let w = nr.min(nc - jp * nr);
                    p.apply(dst.add(jp * kc * nr), nr, (k0, kc), w);
                }
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(g) = self.gather.filter(|g| {
            self.kern == Kernel::Avx512 && nc.is_multiple_of(nr) && j0 % g.seg_len + nc <= g.seg_len
        }) {
            // Whole strips inside one segment (a pointwise conv reading a
            // Concat's operands, `dnnc_sgemm_packed_gather` with one
            // segment): row by row across them, each row's run read in
            // order and transformed by the prologue on the way (DenseNet
            // at batch 8: its 1x1 convs 3-5% faster than strip by strip
            // with the prologue a second pass).
            let seg = (j0 / g.seg_len) as isize * g.seg_step + (j0 % g.seg_len) as isize;
            let rows = (g.base.wrapping_offset(seg), g.row_off.add(k0));
            x86::gather_row_strips_avx512(rows, (k0, kc), nc / nr, dst, self.pro.as_ref());
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(g) = self.gather.filter(|g| {
            let one_segment = j0 % g.seg_len + nc <= g.seg_len;
            let whole_strips = j0.is_multiple_of(nr) && g.seg_len.is_multiple_of(nr);
            self.kern == Kernel::Avx2 && nc.is_multiple_of(nr) && (one_segment || whole_strips)
        }) {
            // The same on the AVX2 kernel's 16-column strips, segment by
            // segment where the block spans several whose strips are all
            // whole (a batch's 56x56 or 28x28 images). Strip by strip,
            // each row's 16 floats went through the generic run loop and
            // the prologue was a second, scalar pass: 11% and 3.5% of
            // DenseNet-121's time at batch 8 on the AMD EPYC Zen 3.
            let mut j = j0;
            while j < j0 + nc {
                let (s, o) = (j / g.seg_len, j % g.seg_len);
                let len = (g.seg_len - o).min(j0 + nc - j);
                let seg = s as isize * g.seg_step + o as isize;
                let rows = (g.base.wrapping_offset(seg), g.row_off.add(k0));
                let d = dst.add((j - j0) / nr * kc * nr);
                x86::gather_row_strips_avx2(rows, (k0, kc), len / nr, d, self.pro.as_ref());
                j += len;
            }
            return;
        }
        for jp in 0..nc.div_ceil(nr) {
            let j = j0 + jp * nr;
            let w = nr.min(j0 + nc - j);
            let d = dst.add(jp * kc * nr);
            let nr = panel_ld(self.kern, narrow, w);
            if let Some(g) = &self.gather {
                self.pack_gather(g, d, nr, k0, kc, j, w);
                if let Some(p) = &self.pro {
                    p.apply(d, nr, (k0, kc), w);
                }
                continue;
            }
            let packed = self.b_cs == 1 && self.pack_rows(d, nr, k0, kc, j, w);
            if !packed {
                for kk in 0..kc {
                    let src = self
                        .b
                        .offset((k0 + kk) as isize * self.b_rs + j as isize * self.b_cs);
                    let row = d.add(kk * nr);
                    if self.b_cs == 1 {
                        std::ptr::copy_nonoverlapping(src, row, w);
                    } else {
                        for jj in 0..w {
                            *row.add(jj) = *src.offset(jj as isize * self.b_cs);
                        }
                    }
                    for jj in w..nr {
                        *row.add(jj) = 0.0;
                    }
                }
            }
            if let Some(p) = &self.pro {
                p.apply(d, nr, (k0, kc), w);
            }
        }
    }

    /// Packs rows `k0..k0+kc` of the `w <= 32` columns from `j` of a
    /// gathered B into rows `ld` apart, zero-filling each to `ld`. The
    /// columns' runs within segments are the same for every row, so they
    /// are worked out once.
    #[allow(clippy::too_many_arguments)]
    unsafe fn pack_gather(
        &self,
        g: &Gather,
        d: *mut f32,
        ld: usize,
        k0: usize,
        kc: usize,
        j: usize,
        w: usize,
    ) {
        debug_assert!(w <= 32 && w <= ld);
        // (source offset within a row, destination column, length)
        let mut runs = [(0isize, 0usize, 0usize); 32];
        let mut nrun = 0;
        let mut pos = 0;
        while pos < w {
            let col = j + pos;
            let (seg, o) = (col / g.seg_len, col % g.seg_len);
            let len = (g.seg_len - o).min(w - pos);
            runs[nrun] = (seg as isize * g.seg_step + o as isize, pos, len);
            nrun += 1;
            pos += len;
        }
        let runs = &runs[..nrun];
        let offs = g.row_off.add(k0);
        match self.kern {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => x86::gather_rows_avx512(g.base, offs, kc, runs, d, ld),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => x86::gather_rows_avx2(g.base, offs, kc, runs, d, ld),
            _ => {
                for kk in 0..kc {
                    let row = g.base.offset(*offs.add(kk) as isize);
                    let dr = d.add(kk * ld);
                    for &(so, at, len) in runs {
                        std::ptr::copy_nonoverlapping(row.offset(so), dr.add(at), len);
                    }
                    for jj in w..ld {
                        *dr.add(jj) = 0.0;
                    }
                }
            }
        }
    }

    /// Packs rows `k0..k0+kc` of the `w` columns from `j` of a row-major B
    /// into rows `ld` apart, zero-filling each to `ld`, with masked vector
    /// loads: the element-wise copy called `memmove` once per row (128
    /// bytes or less), 2-4% of ResNet-18's run in its Winograd GEMMs.
    /// `false` when this kernel has no such path (the caller copies).
    #[inline]
    unsafe fn pack_rows(
        &self,
        d: *mut f32,
        ld: usize,
        k0: usize,
        kc: usize,
        j: usize,
        w: usize,
    ) -> bool {
        let src = self.b.offset(k0 as isize * self.b_rs + j as isize);
        match self.kern {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                x86::pack_rows_avx512(src, self.b_rs, d, ld, kc, w);
                true
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => {
                x86::pack_rows_avx2(src, self.b_rs, d, ld, kc, w);
                true
            }
            _ => false,
        }
    }

    /// `n == 1` (a matrix-vector product): stream each packed A panel
    /// against column `j` of B, accumulating over all of k in registers.
    unsafe fn gemv(&self, panels: std::ops::Range<usize>, j: usize) {
        let mr = self.kern.mr();
        let mp = self.m.div_ceil(mr) * mr;
        let x = self.b.offset(j as isize * self.b_cs);
        for p in panels {
            let mut y = [0f32; 16];
            match self.kern {
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx512 => x86::gemv_avx512(self.a, mp, self.k, p, x, self.b_rs, &mut y),
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => x86::gemv_avx2(self.a, mp, self.k, p, x, self.b_rs, &mut y),
                _ => gemv_portable(self.a, mp, self.k, p, mr, x, self.b_rs, &mut y),
            }
            let rows = mr.min(self.m - p * mr);
            let te = self.ep.as_ref().map(|ep| tile_ep(ep, p * mr, j));
            for (r, &v) in y.iter().enumerate().take(rows) {
                let cp = self
                    .c
                    .offset((p * mr + r) as isize * self.c_rs + j as isize * self.c_cs);
                *cp = match &te {
                    Some(t) => t.apply(r, 0, v),
                    None if self.acc => *cp + v,
                    None => v,
                };
            }
        }
    }
}

impl Gemm {
    /// The epilogue of the tile from element `(i, j)` of C in k block
    /// `(k0, kc)` (none before the last block), when the AVX2 loops of
    /// tiles (`x86::strip_avx2`, `x86::column_avx2`) can store it: on the
    /// AVX2 kernel, with C's and the residual's rows unit-stride. `None`
    /// where they cannot.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_loop_ep(
        &self,
        (k0, kc): (usize, usize),
        (i, j): (usize, usize),
    ) -> Option<Option<TileEp>> {
        let te = match &self.ep {
            Some(ep) if k0 + kc == self.k => Some(tile_ep(ep, i, j)),
            _ => None,
        };
        let unit = te.is_none_or(|e| e.res.is_null() || e.res_cs == 1);
        (self.kern == Kernel::Avx2 && self.c_cs == 1 && unit).then_some(te)
    }

    /// The tiles of the A panels of `panels` (whole 6-row panels and the
    /// matrix's partial last one) by the full-width column strip at `j`
    /// (B's block `b`), for k block `(k0, kc)` of A's block `ablk`,
    /// through one call of the AVX2 column kernel (`x86::column_avx2`),
    /// with the per-tile loop's C hints and,
    /// where `pf`, its prefetches of the next strip's rows (`hint`: the
    /// next strip's C tiles are hinted as the loop hints them); how many
    /// panels it computed from the first (none where that kernel does not
    /// apply: another kernel, a partial strip, a strided C or residual,
    /// fewer than two whole panels). A partial last panel through the
    /// per-tile call kept its accumulators in memory: ResNet-18's 128 x
    /// 784 x 576 stride-2 conv (21 whole panels and one of 2 rows) spent
    /// 6.5% of its time there.
    #[allow(clippy::too_many_arguments)]
    unsafe fn column_tiles(
        &self,
        (k0, kc): (usize, usize),
        ablk: *const f32,
        panels: std::ops::Range<usize>,
        b: (*const f32, usize),
        (j, ncols): (usize, usize),
        (pf, hint): (bool, bool),
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            const MR: usize = 6;
            let p0 = panels.start;
            let Some(te) = self
                .avx2_loop_ep((k0, kc), (p0 * MR, j))
                .filter(|_| ncols == 16)
            else {
                return 0;
            };
            let whole = (self.m / MR).min(panels.end) - p0.min(self.m / MR);
            // The matrix's partial last panel, when the range ends with it.
            let tail_rows = if panels.end * MR > self.m && p0 * MR < self.m {
                self.m % MR
            } else {
                0
            };
            if whole < 2 {
                return 0;
            }
            let first = k0 == 0 && !self.acc;
            let hint = hint && self.k >= 32;
            let cp = self.c.offset((p0 * MR) as isize * self.c_rs + j as isize);
            let next = pf.then(|| (b.0.add(16), self.b_rs, panels.len()));
            x86::column_avx2(
                kc,
                (ablk.add(p0 * kc * MR), kc * MR),
                b,
                (cp, self.c_rs),
                (whole, tail_rows),
                (first, hint),
                next,
                te.as_ref(),
            );
            whole + usize::from(tail_rows > 0)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (k0, kc, ablk, panels, b, j, ncols, pf, hint);
            0
        }
    }

    /// The first `full` (full-width) column tiles of A panel `p` (its
    /// k block at `a`) from column `jc`, through one call of the AVX2
    /// strip kernel (`x86::strip_avx2`), B's tiles `b = (first, ld,
    /// step)`; how many it computed (none where that kernel does not
    /// apply: another kernel, a strided C or residual, fewer than two
    /// tiles).
    unsafe fn strip_tiles(
        &self,
        (k0, kc): (usize, usize),
        a: *const f32,
        p: usize,
        jc: usize,
        full: usize,
        b: (*const f32, usize, usize),
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            let Some(te) = self
                .avx2_loop_ep((k0, kc), (p * 6, jc))
                .filter(|_| full >= 2)
            else {
                return 0;
            };
            let first = k0 == 0 && !self.acc;
            let hint = k0 == 0 && self.k >= 32;
            let cp = self.c.offset((p * 6) as isize * self.c_rs + jc as isize);
            x86::strip_avx2(
                kc,
                a,
                b,
                cp,
                (6.min(self.m - p * 6), full),
                self.c_rs,
                (first, hint),
                te.as_ref(),
            );
            full
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (k0, kc, a, p, jc, full, b);
            0
        }
    }

    /// Whether the last column tile, `ncols` wide, goes through
    /// [`Gemm::tail_tiles`] rather than a tile per panel.
    fn column_tail(&self, ncols: usize) -> bool {
        self.kern == Kernel::Avx2 && ncols <= TAIL_COLS
    }

    /// The tiles of A panels `panels` by the `ncols`-wide (at most
    /// [`TAIL_COLS`]) column tile at `j`, B's block `b` (rows `ld`
    /// apart), for k block `(k0, kc)`: several panels a call of the
    /// AVX2 column kernel, each element then stored as [`store_tile`]
    /// stores it.
    unsafe fn tail_tiles(
        &self,
        (k0, kc): (usize, usize),
        panels: std::ops::Range<usize>,
        b: (*const f32, usize),
        j: usize,
        ncols: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            const MR: usize = 6;
            let mp = self.m.div_ceil(MR) * MR;
            let first = k0 == 0 && !self.acc;
            let last = k0 + kc == self.k;
            let ablk = self.a.add(k0 * mp);
            let mut out = [[0f32; 8]; 8];
            let mut p = panels.start;
            while p < panels.end {
                let left = panels.end - p;
                let a = ablk.add(p * kc * MR);
                let g = match (ncols, left) {
                    (1, 8..) => {
                        x86::tail_cols_avx2::<8, 1>(kc, a, b, &mut out);
                        8
                    }
                    (1, 4..) => {
                        x86::tail_cols_avx2::<4, 1>(kc, a, b, &mut out);
                        4
                    }
                    (1, 2..) => {
                        x86::tail_cols_avx2::<2, 1>(kc, a, b, &mut out);
                        2
                    }
                    (1, _) => {
                        x86::tail_cols_avx2::<1, 1>(kc, a, b, &mut out);
                        1
                    }
                    (_, 4..) => {
                        x86::tail_cols_avx2::<4, 2>(kc, a, b, &mut out);
                        4
                    }
                    (_, 2..) => {
                        x86::tail_cols_avx2::<2, 2>(kc, a, b, &mut out);
                        2
                    }
                    _ => {
                        x86::tail_cols_avx2::<1, 2>(kc, a, b, &mut out);
                        1
                    }
                };
                for q in 0..g {
                    let pq = p + q;
                    let rows = MR.min(self.m - pq * MR);
                    let mut t = [0f32; MR * 2];
                    for r in 0..rows {
                        for w in 0..ncols {
                            t[r * 2 + w] = out[q * ncols + w][r];
                        }
                    }
                    let te = match &self.ep {
                        Some(ep) if last => Some(tile_ep(ep, pq * MR, j)),
                        _ => None,
                    };
                    let cp = self
                        .c
                        .offset((pq * MR) as isize * self.c_rs + j as isize * self.c_cs);
                    store_tile(
                        &t,
                        2,
                        cp,
                        (rows, ncols),
                        (self.c_rs, self.c_cs),
                        first,
                        te.as_ref(),
                    );
                }
                p += g;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (k0, kc, panels, b, j, ncols);
    }
}

/// Portable GEMV over one panel: 4 partial sums per row (k mod 4), added
/// in a fixed order at the end.
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_portable(
    a: *const f32,
    mp: usize,
    k: usize,
    p: usize,
    mr: usize,
    x: *const f32,
    x_s: isize,
    y: &mut [f32; 16],
) {
    let mut acc = [[0f32; 16]; 4];
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        let pa = a.add(k0 * mp + p * kc * mr);
        for kk in 0..kc {
            let xv = *x.offset((k0 + kk) as isize * x_s);
            let s = &mut acc[(k0 + kk) % 4];
            for (r, v) in s.iter_mut().enumerate().take(mr) {
                *v += *pa.add(kk * mr + r) * xv;
            }
        }
    }
    for r in 0..mr {
        y[r] = (acc[0][r] + acc[1][r]) + (acc[2][r] + acc[3][r]);
    }
}

/// One `rows x cols` tile of C (`rows <= MR`, `cols <= NR`) from a `kc x
/// MR` A panel and a `kc x NR` B panel: `C = acc` when `first`, else
/// `C += acc`; then the epilogue `ep`, if any (the tile's last k block).
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn micro(
    kern: Kernel,
    kc: usize,
    a: *const f32,
    b: (*const f32, usize),
    c: *mut f32,
    dims: (usize, usize),
    cs: (isize, isize),
    first: bool,
    ep: Option<&TileEp>,
) {
    match kern {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 if b.1 == 16 => x86::micro_avx512_n16(kc, a, b, c, dims, cs, first, ep),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => x86::micro_avx512(kc, a, b, c, dims, cs, first, ep),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => x86::micro_avx2(kc, a, b, c, dims, cs, first, ep),
        _ => micro_portable(kc, a, b, c, dims, cs, first, ep),
    }
}

/// Writes a computed `MR x NR` tile (row-major, `nr` wide) to C: the
/// generic path for strided C and partial tiles.
#[inline]
unsafe fn store_tile(
    t: &[f32],
    nr: usize,
    c: *mut f32,
    (rows, cols): (usize, usize),
    (c_rs, c_cs): (isize, isize),
    first: bool,
    ep: Option<&TileEp>,
) {
    for r in 0..rows {
        for j in 0..cols {
            let p = c.offset(r as isize * c_rs + j as isize * c_cs);
            let v = t[r * nr + j];
            let v = if first { v } else { *p + v };
            *p = match ep {
                Some(e) => e.apply(r, j, v),
                None => v,
            };
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn micro_portable(
    kc: usize,
    a: *const f32,
    (b, ldb): (*const f32, usize),
    c: *mut f32,
    dims: (usize, usize),
    cs: (isize, isize),
    first: bool,
    ep: Option<&TileEp>,
) {
    const MR: usize = 4;
    const NR: usize = 8;
    let mut acc = [[0f32; NR]; MR];
    for kk in 0..kc {
        let bv: [f32; NR] = std::ptr::read_unaligned(b.add(kk * ldb) as *const [f32; NR]);
        for (r, row) in acc.iter_mut().enumerate() {
            let av = *a.add(kk * MR + r);
            for (x, &bj) in row.iter_mut().zip(&bv) {
                *x += av * bj;
            }
        }
    }
    let flat: [f32; MR * NR] = std::mem::transmute(acc);
    store_tile(&flat, NR, c, dims, cs, first, ep);
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::{store_tile, TileEp, KC};
    use std::arch::x86_64::*;

    /// Software prefetch distance along packed A, in floats.
    const A_PREFETCH: usize = 512;

    /// Software prefetch distance of the AVX2 GEMV along a packed panel,
    /// in floats (2 KiB): with the weights on huge pages, 1000 x 1 x 1280
    /// cold 740-860 -> 615-730 us on the AMD EPYC (4 KiB about the same,
    /// 8-16 KiB less; without huge pages it measured no faster).
    const GEMV_AVX2_PREFETCH: usize = 512;

    /// Distance of a one-column lanes tile's second, L2 prefetch along
    /// packed A, in floats (8 KiB; see `lanes_cols`).
    const GEMV_L2_PREFETCH: usize = 2048;

    /// Distance of the narrow kernel's second, L2 prefetch along packed A,
    /// in floats (128 KiB). With at most 16 columns each A element feeds
    /// at most 16 multiply-adds, so a filter that streams from memory
    /// (Winograd F(2x2) on 7x7 maps: ResNet-18's layer4, 16 tiles, 16.8
    /// MB of transformed filter per conv, ~80 MB of weights in all) bounds
    /// the kernel by memory, and the hardware prefetchers stop at each 4
    /// KiB page. Fetching into L2 this far ahead keeps enough lines in
    /// flight: ResNet-18 at one thread 13.92 -> 12.84 ms (medians of 5
    /// alternating runs; 4 KiB and 16 KiB ahead gained less, 64 KiB
    /// 13.09), its layer4 convs 1.21-1.27 -> 0.90-1.05 ms, GoogLeNet
    /// 12.53 -> 12.24; models whose weights stay cached unchanged. The
    /// wide kernel (32 columns per A element pair) gained nothing from it.
    const NARROW_L2_PREFETCH: usize = 32768;

    /// Software prefetch distance along a B read in place, in rows.
    const B_PREFETCH_ROWS: usize = 8;

    /// The least k block length for which B read in place is prefetched.
    const B_PREFETCH_MIN_KC: usize = 64;

    /// AVX-512F `14 x 32` micro-kernel: per k, two B vectors and 14
    /// broadcast A elements feed 28 FMAs into 28 zmm accumulators. A tail
    /// panel (the last of an `m` that is not a multiple of 14) computes
    /// only its rows, rounded up to even, instead of all 14: with
    /// MobileNet-V2's `m = 16` pointwise conv the padded rows were 12 of
    /// 28. Each element's FMA sequence is the same either way (bitwise).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn micro_avx512(
        kc: usize,
        a: *const f32,
        b: (*const f32, usize),
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        let (b, ldb) = b;
        micro_avx512_src(kc, a, Strided::new(b, ldb, kc), c, dims, cs, first, ep)
    }

    /// Where the 32-wide kernel reads B's rows, one after another.
    trait BRows: Copy {
        /// The current row (32 floats).
        unsafe fn row(&self) -> *const f32;
        /// Moves to the next row, after hinting rows to come.
        unsafe fn advance(&mut self);
    }

    /// Rows `ldb` apart (a packed panel, an L1 strip, or B in place).
    #[derive(Clone, Copy)]
    struct Strided {
        b: *const f32,
        ldb: usize,
        /// Prefetch distance in floats, when B is read in place.
        pf: Option<usize>,
    }

    impl Strided {
        /// B read in place (rows `ldb` apart, often on different pages):
        /// fetch row k + `B_PREFETCH_ROWS` of the *next* strip (32
        /// columns on, which the callers run next), which no hardware
        /// prefetcher predicts. Fetching the current strip's rows instead
        /// left B arriving from L3 late: with B out of L2, as a conv's
        /// input usually is, SqueezeNet's 16 x 3025 x 128 squeeze went
        /// from 141 to 109 us, 32 x 729 x 256 from 106 to 84,
        /// MobileNet-V2's 24 x 3136 x 144 projection from 199 to 172. Not
        /// for short k blocks, whose last rows' prefetches are wasted (96
        /// x 24 x 12544: 372 -> 404).
        fn new(b: *const f32, ldb: usize, kc: usize) -> Self {
            let on = ldb != 32 && kc >= B_PREFETCH_MIN_KC;
            Strided {
                b,
                ldb,
                pf: on.then_some(B_PREFETCH_ROWS * ldb + 32),
            }
        }
    }

    impl BRows for Strided {
        #[inline(always)]
        unsafe fn row(&self) -> *const f32 {
            self.b
        }
        #[inline(always)]
        unsafe fn advance(&mut self) {
            if let Some(pf) = self.pf {
                _mm_prefetch::<_MM_HINT_T0>(self.b.wrapping_add(pf) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(self.b.wrapping_add(pf + 16) as *const i8);
            }
            self.b = self.b.add(self.ldb);
        }
    }

    /// [`micro_avx512`] over a strip copied to L1 scratch (`b`, rows 32
    /// floats apart) that also prefetches, a line a k step, its share of
    /// the block B copies next (`walk`), so B's rows stream from memory
    /// while the tiles compute instead of all at once in the copy (see
    /// `Gemm::run_direct`).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn micro_avx512_streamed(
        kc: usize,
        a: *const f32,
        b: *const f32,
        walk: LineWalk,
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        let src = Streamed { b, walk };
        micro_avx512_src(kc, a, src, c, dims, cs, first, ep)
    }

    /// One line a k step down one half (16 floats) of a 32-column strip
    /// of B, rows `rs` floats apart: `left` lines from `at`.
    #[derive(Clone, Copy)]
    pub(super) struct LineWalk {
        at: *const f32,
        rs: isize,
        left: usize,
    }

    impl LineWalk {
        /// Tile `q`'s walk through the `rows` rows of the strip at `base`
        /// while it runs `steps` k steps: tiles 0 and 1 take the left and
        /// right halves of the first `steps` rows, tiles 2 and 3 of the
        /// next `steps`, and so on; `None` past the last row.
        pub(super) fn share(
            base: *const f32,
            rs: isize,
            rows: usize,
            q: usize,
            steps: usize,
        ) -> Option<LineWalk> {
            let r0 = (q / 2) * steps;
            (r0 < rows).then(|| LineWalk {
                at: base.wrapping_offset(r0 as isize * rs + 16 * (q % 2) as isize),
                rs,
                left: steps.min(rows - r0),
            })
        }

        /// Prefetches the walk's next line, if any.
        #[inline(always)]
        unsafe fn step(&mut self) {
            if self.left != 0 {
                _mm_prefetch::<_MM_HINT_T0>(self.at as *const i8);
                self.at = self.at.wrapping_offset(self.rs);
                self.left -= 1;
            }
        }
    }

    #[cfg(test)]
    mod line_walk_tests {
        use super::LineWalk;

        /// The tiles' walks cover every line of the next block's first
        /// `ceil(tiles / 2) * steps` rows (both halves of each row) once,
        /// and nothing past its last row: a short block is walked to its
        /// end, a long one as far as the tiles' steps go.
        #[test]
        fn the_tiles_walk_each_line_of_the_next_block_once() {
            let rs = 1225isize;
            let base = std::ptr::null::<f32>().wrapping_add(1 << 20);
            for (rows, steps, tiles) in [(256, 256, 5), (32, 256, 5), (256, 32, 5), (300, 44, 8)] {
                let mut seen = Vec::new();
                for q in 0..tiles {
                    if let Some(w) = LineWalk::share(base, rs, rows, q, steps) {
                        assert!(w.left <= steps);
                        for i in 0..w.left as isize {
                            let off = (w.at as isize - base as isize) / 4 + i * w.rs;
                            seen.push((off / rs, off % rs));
                        }
                    }
                }
                seen.sort();
                let reach = rows.min(tiles.div_ceil(2) * steps) as isize;
                let want: Vec<(isize, isize)> =
                    (0..reach).flat_map(|r| [(r, 0), (r, 16)]).collect();
                // Tile `tiles - 1` of an odd count walks only left halves.
                let want: Vec<_> = want
                    .into_iter()
                    .filter(|&(r, h)| {
                        let pair = r as usize / steps;
                        2 * pair + usize::from(h == 16) < tiles
                    })
                    .collect();
                assert_eq!(seen, want, "rows {rows}, steps {steps}, tiles {tiles}");
            }
        }
    }

    /// Rows of a copied strip (32 floats apart), with a [`LineWalk`]
    /// through the block copied next.
    #[derive(Clone, Copy)]
    struct Streamed {
        b: *const f32,
        walk: LineWalk,
    }

    impl BRows for Streamed {
        #[inline(always)]
        unsafe fn row(&self) -> *const f32 {
            self.b
        }
        #[inline(always)]
        unsafe fn advance(&mut self) {
            self.walk.step();
            self.b = self.b.add(32);
        }
    }

    /// Row `k` at `base + offs[k]` (a gathered B's strip inside one
    /// segment, read in place).
    #[derive(Clone, Copy)]
    struct Table {
        base: *const f32,
        offs: *const i64,
    }

    impl BRows for Table {
        #[inline(always)]
        unsafe fn row(&self) -> *const f32 {
            self.base.offset(*self.offs as isize)
        }
        #[inline(always)]
        unsafe fn advance(&mut self) {
            self.offs = self.offs.add(1);
        }
    }

    /// [`micro_avx512`] over any [`BRows`]: the kernel for the panel's
    /// rows, rounded up to even.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn micro_avx512_src<S: BRows>(
        kc: usize,
        a: *const f32,
        b: S,
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        match dims.0 {
            0..=2 => micro_avx512_rows::<2, S>(kc, a, b, c, dims, cs, first, ep),
            3..=4 => micro_avx512_rows::<4, S>(kc, a, b, c, dims, cs, first, ep),
            5..=6 => micro_avx512_rows::<6, S>(kc, a, b, c, dims, cs, first, ep),
            7..=8 => micro_avx512_rows::<8, S>(kc, a, b, c, dims, cs, first, ep),
            9..=10 => micro_avx512_rows::<10, S>(kc, a, b, c, dims, cs, first, ep),
            11..=12 => micro_avx512_rows::<12, S>(kc, a, b, c, dims, cs, first, ep),
            _ => micro_avx512_rows::<14, S>(kc, a, b, c, dims, cs, first, ep),
        }
    }

    /// [`micro_avx512`] computing the first `R` rows of the 14-row panel.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn micro_avx512_rows<const R: usize, S: BRows>(
        kc: usize,
        a: *const f32,
        mut b: S,
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 14;
        debug_assert!(dims.0 <= R && R <= MR);
        prefetch_tile_out(c, dims, cs, first, ep, 4);
        let mut c0 = [_mm512_setzero_ps(); R];
        let mut c1 = [_mm512_setzero_ps(); R];
        let mut a = a;
        // Two k steps a turn: hot `pgemm_shapes` (128 x 784 x 256, 256 x
        // 196 x 832, 64 x 1024 x 256, 192 x 289 x 768) 1-5% faster in 12
        // of 12 alternating pairs; models within their noise.
        for _ in 0..kc / 2 {
            // A streams from memory for large weights: fetch ~4 KiB ahead
            // (the next panels follow contiguously) so it overlaps compute.
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH) as *const i8);
            step_rows(a, b.row(), &mut c0, &mut c1);
            b.advance();
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH + MR) as *const i8);
            step_rows(a.add(MR), b.row(), &mut c0, &mut c1);
            a = a.add(2 * MR);
            b.advance();
        }
        if kc % 2 == 1 {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH) as *const i8);
            step_rows(a, b.row(), &mut c0, &mut c1);
            b.advance();
        }
        finish_rows(&c0, &c1, c, dims, cs, first, ep);
    }

    /// Hints the lines the tile's store will read, before its k loop: the
    /// residual operand's rows (and C's, when the tile adds to it), `lines`
    /// 64-byte lines per row. At batch 8 a conv's residual comes from
    /// memory (ResNet-50's layer1 tensors are 25.7 MB), and loaded only at
    /// the store it stalled the kernel on every row. C's lines hinted for
    /// writing too (as the lanes tiles do) took a 64 -> 256 pointwise conv
    /// with residual on [8,64,56,56] 13.4-13.5 -> 13.1-13.2 ms but
    /// SqueezeNet's k = 16 expansions 0.47 -> 0.49 ms (their 56 hints a
    /// tile against 16 k steps, C in cache at batch 1): not kept.
    #[inline(always)]
    unsafe fn prefetch_tile_out(
        c: *mut f32,
        (rows, _cols): (usize, usize),
        (c_rs, c_cs): (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
        lines: usize,
    ) {
        let offs = |l: usize| 16 * l;
        if let Some(e) = ep.filter(|e| !e.res.is_null() && e.res_cs == 1) {
            hint_rows::<false>(e.res, e.res_rs, rows, lines, offs);
        }
        if !first && c_cs == 1 {
            hint_rows::<false>(c, c_rs, rows, lines, offs);
        }
    }

    /// Hints, for reading or (`WRITE`) writing, floats `off(0..n)` of
    /// each of `rows` rows from `p`, `rs` floats apart: the tiles' hints
    /// of the lines their stores will touch. Never dereferences.
    #[inline(always)]
    pub(super) unsafe fn hint_rows<const WRITE: bool>(
        p: *const f32,
        rs: isize,
        rows: usize,
        n: usize,
        off: impl Fn(usize) -> usize,
    ) {
        for r in 0..rows {
            let q = p.wrapping_offset(r as isize * rs);
            for l in 0..n {
                let a = q.wrapping_add(off(l)) as *const i8;
                if WRITE {
                    _mm_prefetch::<_MM_HINT_ET0>(a);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(a);
                }
            }
        }
    }

    /// One k step of the 32-wide kernels: B's row `b` (32 floats) times
    /// the `R` A elements at `a` into the accumulators. Always inlined,
    /// as [`finish_rows`].
    #[inline(always)]
    unsafe fn step_rows<const R: usize>(
        a: *const f32,
        b: *const f32,
        c0: &mut [__m512; R],
        c1: &mut [__m512; R],
    ) {
        let b0 = _mm512_loadu_ps(b);
        let b1 = _mm512_loadu_ps(b.add(16));
        for r in 0..R {
            let ar = _mm512_set1_ps(*a.add(r));
            c0[r] = _mm512_fmadd_ps(ar, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(ar, b1, c1[r]);
        }
    }

    /// Writes the `R x 32` accumulators of [`micro_avx512_rows`] to C's
    /// `rows x cols` tile.
    ///
    /// Always inlined (no `target_feature` of its own, which would forbid
    /// that): as a call it made the kernels spill their accumulators to
    /// pass them (3% of a stride-2 conv's samples in `finish_rows`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn finish_rows<const R: usize>(
        c0: &[__m512; R],
        c1: &[__m512; R],
        c: *mut f32,
        (rows, cols): (usize, usize),
        (c_rs, c_cs): (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 14;
        let res_unit = ep.is_none_or(|e| e.res.is_null() || e.res_cs == 1);
        if c_cs == 1 && res_unit {
            let m0: __mmask16 = if cols >= 16 {
                0xffff
            } else {
                (1u32 << cols) as u16 - 1
            };
            let m1: __mmask16 = if cols >= 32 {
                0xffff
            } else if cols > 16 {
                (1u32 << (cols - 16)) as u16 - 1
            } else {
                0
            };
            // A bias and/or clamp from registers (see `PlainEp`).
            if let Some(pe) = PlainEp::of(ep) {
                macro_rules! row_ep {
                    ($($r:literal)*) => {$(
                        if $r < R && $r < rows {
                            let p = c.offset($r as isize * c_rs);
                            let b = pe.bias_row($r);
                            pe.store(c0[$r], p, m0, b, first);
                            pe.store(c1[$r], p.add(16), m1, b, first);
                        }
                    )*};
                }
                row_ep!(0 1 2 3 4 5 6 7 8 9 10 11 12 13);
                return;
            }
            // One literal row index per store: with a loop over the rows
            // (LLVM keeps it rolled, the epilogue being long) the
            // accumulators went to the stack after the k loop and were
            // zeroed there before it, ~150 cycles a tile: a third of a
            // 16-deep one (SqueezeNet's expand convs).
            macro_rules! row {
                ($($r:literal)*) => {$(
                    if $r < R && $r < rows {
                        let p = c.offset($r as isize * c_rs);
                        store16(c0[$r], p, m0, $r, 0, first, ep);
                        store16(c1[$r], p.add(16), m1, $r, 16, first, ep);
                    }
                )*};
            }
            row!(0 1 2 3 4 5 6 7 8 9 10 11 12 13);
        } else {
            // Through memory: a reference to the accumulators themselves
            // kept a stack copy of each updated in the k loop (a store per
            // FMA, half the kernel's speed).
            let mut t = [0f32; MR * 32];
            for r in 0..R {
                _mm512_storeu_ps(t.as_mut_ptr().add(r * 32), c0[r]);
                _mm512_storeu_ps(t.as_mut_ptr().add(r * 32 + 16), c1[r]);
            }
            if c_rs == 1 && ep.is_none_or(|e| e.res.is_null() || e.res_rs == 1) {
                store_transposed_avx512(&t, 32, c, (rows, cols), c_cs, first, ep);
            } else {
                store_tile(&t, 32, c, (rows, cols), (c_rs, c_cs), first, ep);
            }
        }
    }

    /// Stores a tile (`t`, rows `nr` floats apart) into a C whose rows are
    /// one float apart (a MatMul by a weight on its right runs as `Cᵀ =
    /// Bᵀ Aᵀ`, so its tiles land transposed): each 16 columns' rows are
    /// transposed in registers ([`transpose16`]) and every column's rows
    /// go out as one masked vector through [`store_col16`]'s epilogue, the
    /// operations of `store_tile`'s scalar loop in its order. ConvNeXt-T's
    /// first 3136 x 384 -> 96 layer, one thread: 3.19 ms element by
    /// element, 2.60 ms so. Out of line, so the row-major tiles' code
    /// stays as it was.
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_transposed_avx512(
        t: &[f32],
        nr: usize,
        c: *mut f32,
        (rows, cols): (usize, usize),
        c_cs: isize,
        first: bool,
        ep: Option<&TileEp>,
    ) {
        let m: __mmask16 = ((1u32 << rows) - 1) as u16;
        for h in 0..cols.div_ceil(16) {
            let mut col = [_mm512_setzero_ps(); 16];
            for (r, v) in col.iter_mut().enumerate().take(rows) {
                *v = _mm512_loadu_ps(t.as_ptr().add(r * nr + 16 * h));
            }
            transpose16(&mut col);
            for (jj, &sum) in col.iter().enumerate() {
                let j = 16 * h + jj;
                if j >= cols {
                    return;
                }
                let p = c.offset(j as isize * c_cs);
                let mut v = sum;
                if !first {
                    v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), v);
                }
                store_col16(v, p, m, (0, j), ep);
            }
        }
    }

    /// [`micro_avx512`] with B's rows at `base + offs[k]` (a gathered B's
    /// strip that lies inside one segment, read in place rather than
    /// copied): the same FMAs in the same order, so bitwise the same tile.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn micro_avx512_tab(
        kc: usize,
        a: *const f32,
        (base, offs): (*const f32, *const i64),
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        micro_avx512_src(kc, a, Table { base, offs }, c, dims, cs, first, ep)
    }

    /// The common conv epilogue (a bias and/or a clamp, no residual, no
    /// activation) read into registers once per tile: through
    /// [`store16`] every store reloaded the epilogue's fields and branched
    /// on them (the stores to C may alias it), ~500 instructions a
    /// 14 x 32 tile, a third of a k = 27 tile's time (SqueezeNet's stem).
    /// The same operations in the same order as [`store16`], so bitwise
    /// the same.
    #[derive(Clone, Copy)]
    struct PlainEp {
        bias: *const f32,
        clamp: bool,
        lo: __m512,
        hi: __m512,
    }

    impl PlainEp {
        /// `ep` read into registers, when it is a bias and/or a clamp.
        #[inline(always)]
        unsafe fn of(ep: Option<&TileEp>) -> Option<PlainEp> {
            let e = *ep.filter(|e| e.res.is_null() && e.act == super::ACT_NONE)?;
            Some(PlainEp {
                bias: e.bias,
                clamp: e.clamp,
                lo: _mm512_set1_ps(e.lo),
                hi: _mm512_set1_ps(e.hi),
            })
        }

        /// Tile row `r`'s bias, broadcast (zeros when there is none).
        #[inline(always)]
        unsafe fn bias_row(&self, r: usize) -> __m512 {
            if self.bias.is_null() {
                _mm512_setzero_ps()
            } else {
                _mm512_set1_ps(*self.bias.add(r))
            }
        }

        /// [`store16`] with this epilogue and row bias `b`.
        #[inline(always)]
        unsafe fn store(&self, mut v: __m512, p: *mut f32, m: __mmask16, b: __m512, first: bool) {
            if !first {
                v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), v);
            }
            if !self.bias.is_null() {
                v = _mm512_add_ps(v, b);
            }
            if self.clamp {
                v = _mm512_min_ps(self.hi, _mm512_max_ps(self.lo, v));
            }
            _mm512_mask_storeu_ps(p, m, v);
        }
    }

    /// Stores the 16 lanes `m` of accumulator `v` (tile row `r`, columns
    /// `col..col + 16` of the tile) at `p`: adds the old C unless `first`,
    /// then [`epilogue16`] with the row's bias broadcast. Shared by both
    /// AVX-512 kernels, so they agree bitwise.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store16(
        mut v: __m512,
        p: *mut f32,
        m: __mmask16,
        r: usize,
        col: usize,
        first: bool,
        ep: Option<&TileEp>,
    ) {
        if !first {
            v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, p), v);
        }
        if let Some(e) = ep {
            let bias = (!e.bias.is_null()).then(|| _mm512_set1_ps(*e.bias.add(r)));
            let res = (!e.res.is_null()).then(|| e.res.offset(r as isize * e.res_rs).add(col));
            v = epilogue16(v, m, bias, res, e);
        }
        _mm512_mask_storeu_ps(p, m, v);
    }

    /// The epilogue `e` on the 16 lanes `v` (`m` the live ones): `bias`
    /// added (a row's bias broadcast, or a bias per lane), then the
    /// residual at `res`, the clamp, the activation, in the operations and
    /// order of `TileEp::apply`. Every AVX-512 store goes through it, so
    /// they agree bitwise.
    #[inline(always)]
    unsafe fn epilogue16(
        mut v: __m512,
        m: __mmask16,
        bias: Option<__m512>,
        res: Option<*const f32>,
        e: &TileEp,
    ) -> __m512 {
        if let Some(b) = bias {
            v = _mm512_add_ps(v, b);
        }
        if let Some(q) = res {
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, q));
        }
        // max(lo, v) then min(hi, v): with v NaN both return v (the
        // second operand), as `clamp_keep_nan` keeps it.
        if e.clamp {
            let (lo, hi) = (_mm512_set1_ps(e.lo), _mm512_set1_ps(e.hi));
            v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
        }
        match e.act {
            super::ACT_SIGMOID => v = sigmoid16(v),
            super::ACT_SILU => v = _mm512_mul_ps(v, sigmoid16(v)),
            super::ACT_GELU => v = gelu16(v),
            _ => {}
        }
        v
    }

    /// The 16 C rows from `r` of column `j` (rows one float apart in C,
    /// `m` the live ones) through [`epilogue16`], the bias and the
    /// residual (its rows one float apart too) loaded as vectors.
    #[inline(always)]
    unsafe fn store_col16(
        mut v: __m512,
        p: *mut f32,
        m: __mmask16,
        (r, j): (usize, usize),
        ep: Option<&TileEp>,
    ) {
        if let Some(e) = ep {
            let bias = (!e.bias.is_null()).then(|| _mm512_maskz_loadu_ps(m, e.bias.add(r)));
            let res = (!e.res.is_null()).then(|| e.res.offset(r as isize + j as isize * e.res_cs));
            v = epilogue16(v, m, bias, res, e);
        }
        _mm512_mask_storeu_ps(p, m, v);
    }

    /// [`super::sigmoid`] on 16 lanes, operation for operation.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn sigmoid16(v: __m512) -> __m512 {
        use super::sig;
        let x = _mm512_max_ps(v, _mm512_set1_ps(sig::LO));
        let x = _mm512_min_ps(x, _mm512_set1_ps(sig::HI));
        let magic = _mm512_set1_ps(sig::MAGIC);
        let y = _mm512_fmadd_ps(x, _mm512_set1_ps(sig::NLOG2E), magic);
        let n = _mm512_sub_ps(y, magic);
        let s = _mm512_fmadd_ps(n, _mm512_set1_ps(sig::LN2_HI), x);
        let s = _mm512_fmadd_ps(n, _mm512_set1_ps(sig::LN2_LO), s);
        let mut p = _mm512_set1_ps(sig::Q[0]);
        for &k in &sig::Q[1..] {
            p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(k));
        }
        let one = _mm512_set1_ps(1.0);
        let q = _mm512_sub_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(s, s), one), s);
        let scale = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_castps_si512(y)));
        let e = _mm512_div_ps(one, _mm512_fmadd_ps(q, scale, one));
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        _mm512_mask_blend_ps(nan, e, v)
    }

    /// Horner's rule on 16 lanes, a rounded multiply then a rounded add
    /// per step (`super::horner`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn horner16(x: __m512, c: &[f32]) -> __m512 {
        let mut acc = _mm512_set1_ps(c[0]);
        for &k in &c[1..] {
            acc = _mm512_add_ps(_mm512_mul_ps(acc, x), _mm512_set1_ps(k));
        }
        acc
    }

    /// [`super::gelu`] on 16 lanes: `gelu8`'s operations (no fused
    /// multiply-adds, as the generated code has none), so bitwise the
    /// scalar version and the generated elementwise chain.
    #[inline]
    #[target_feature(enable = "avx512f")]
    pub(in crate::cpu) unsafe fn gelu16(v: __m512) -> __m512 {
        use super::erf;
        let x = _mm512_div_ps(v, _mm512_set1_ps(std::f32::consts::SQRT_2));
        let sign = _mm512_set1_epi32(i32::MIN);
        let xi = _mm512_castps_si512(x);
        let ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, xi));
        let z = _mm512_mul_ps(x, x);
        let p = _mm512_mul_ps(
            horner16(z, &erf::SERIES),
            _mm512_set1_ps(std::f32::consts::FRAC_2_SQRT_PI),
        );
        let small = _mm512_mul_ps(p, x);
        let one = _mm512_set1_ps(1.0);
        let t = _mm512_add_ps(_mm512_mul_ps(ax, _mm512_set1_ps(erf::T)), one);
        let t = _mm512_div_ps(one, t);
        let q = _mm512_mul_ps(horner16(t, &erf::AS), t);
        // exp(-z), as `exp_exact` (its argument is never NaN here).
        let nz = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(z), sign));
        let hi = _mm512_set1_ps(erf::EXP_HI);
        let xc = _mm512_max_ps(_mm512_min_ps(nz, hi), _mm512_set1_ps(erf::EXP_LO));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(xc, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(erf::LN2_HI)));
        let r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(erf::LN2_LO)));
        let e = _mm512_mul_ps(horner16(r, &super::sig::P), _mm512_mul_ps(r, r));
        let e = _mm512_add_ps(_mm512_add_ps(e, r), one);
        let ni = _mm512_cvttps_epi32(n);
        let n1 = _mm512_srai_epi32::<1>(ni);
        let n2 = _mm512_sub_epi32(ni, n1);
        let bias = _mm512_set1_epi32(127);
        let p1 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n1, bias)));
        let p2 = _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(n2, bias)));
        let ez = _mm512_mul_ps(_mm512_mul_ps(e, p1), p2);
        let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(nz, hi);
        let ez = _mm512_mask_blend_ps(over, ez, _mm512_set1_ps(f32::INFINITY));
        let q = _mm512_mul_ps(q, ez);
        let big = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(_mm512_sub_ps(one, q)),
            _mm512_and_si512(xi, sign),
        ));
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(ax, _mm512_set1_ps(erf::SMALL));
        let r = _mm512_mask_blend_ps(below, big, small);
        let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
        let r = _mm512_mask_blend_ps(nan, r, x);
        _mm512_mul_ps(_mm512_mul_ps(v, _mm512_add_ps(r, one)), _mm512_set1_ps(0.5))
    }

    /// AVX-512F narrow `14 x 16` micro-kernel for column blocks of at most
    /// 16 (B panel 16 wide): per k, one B vector and 14 broadcast A
    /// elements feed 14 FMAs, none of them masked off. Each element's
    /// accumulation and epilogue are those of [`micro_avx512`], so the two
    /// kernels agree bitwise.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn micro_avx512_n16(
        kc: usize,
        a: *const f32,
        (b, ldb): (*const f32, usize),
        c: *mut f32,
        (rows, cols): (usize, usize),
        (c_rs, c_cs): (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 14;
        debug_assert!(ldb == 16 && cols <= 16);
        let mut c0 = [_mm512_setzero_ps(); MR];
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH) as *const i8);
            // A line past the end of A is a hint, never a load.
            _mm_prefetch::<_MM_HINT_T1>(a.wrapping_add(NARROW_L2_PREFETCH) as *const i8);
            let b0 = _mm512_loadu_ps(b);
            for (r, acc) in c0.iter_mut().enumerate() {
                let ar = _mm512_set1_ps(*a.add(r));
                *acc = _mm512_fmadd_ps(ar, b0, *acc);
            }
            a = a.add(MR);
            b = b.add(ldb);
        }
        let res_unit = ep.is_none_or(|e| e.res.is_null() || e.res_cs == 1);
        if c_cs == 1 && res_unit {
            let m0: __mmask16 = if cols >= 16 {
                0xffff
            } else {
                (1u32 << cols) as u16 - 1
            };
            // Literal row indices: see `finish_rows`.
            if let Some(pe) = PlainEp::of(ep) {
                macro_rules! row_ep {
                    ($($r:literal)*) => {$(
                        if $r < rows {
                            let p = c.offset($r as isize * c_rs);
                            pe.store(c0[$r], p, m0, pe.bias_row($r), first);
                        }
                    )*};
                }
                row_ep!(0 1 2 3 4 5 6 7 8 9 10 11 12 13);
                return;
            }
            macro_rules! row {
                ($($r:literal)*) => {$(
                    if $r < rows {
                        store16(c0[$r], c.offset($r as isize * c_rs), m0, $r, 0, first, ep);
                    }
                )*};
            }
            row!(0 1 2 3 4 5 6 7 8 9 10 11 12 13);
        } else {
            let mut t = [0f32; MR * 16];
            for (r, &acc) in c0.iter().enumerate() {
                _mm512_storeu_ps(t.as_mut_ptr().add(r * 16), acc);
            }
            if c_rs == 1 && ep.is_none_or(|e| e.res.is_null() || e.res_rs == 1) {
                store_transposed_avx512(&t, 16, c, (rows, cols), c_cs, first, ep);
            } else {
                store_tile(&t, 16, c, (rows, cols), (c_rs, c_cs), first, ep);
            }
        }
    }

    /// One [`Layout::Lanes`](super::Layout::Lanes) tile: C rows `i..i +
    /// rows` (`rows <= 32`, the lanes) by columns `j..j + cols` (`cols <=
    /// 14`, one accumulator pair each), from the panel `a` (32 floats per
    /// k) and B's rows at `b` (`b_rs` apart, the tile's columns
    /// contiguous). k runs in `KC` blocks as in the panels kernels; each
    /// block's sums are added to the tile's running total (`C = acc`
    /// after the first block, `C += acc` after the others, or from C's
    /// old values when `acc`), so every element gets the additions, in
    /// the order, that [`micro_avx512`] gives it. The total is then
    /// transposed into C, each C row through [`store16`]'s epilogue.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn lanes_tile(
        k: usize,
        a: *const f32,
        b: LaneRows,
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        acc: bool,
        ep: Option<&TileEp>,
    ) {
        macro_rules! by_cols {
            ($src:expr, $($n:literal)*) => {
                match dims.1 {
                    $($n => lanes_cols::<$n, _>(k, a, $src, c, dims, cs, acc, ep),)*
                    _ => unreachable!("lanes tiles have 1 to 14 columns"),
                }
            };
        }
        match b {
            LaneRows::Strided(p, rs) => {
                by_cols!(StridedRows(p, rs), 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
            }
            LaneRows::StridedCols(p, rs, cs) => {
                by_cols!(StridedColRows(p, rs, cs), 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
            }
            LaneRows::Table(p, offs) => {
                by_cols!(TableRows(p, offs, k), 1 2 3 4 5 6 7 8 9 10 11 12 13 14)
            }
            LaneRows::TablePair(p, offs, delta) => {
                by_cols!(TablePairRows(TableRows(p, offs, k), delta), 8 9 10 11 12 13 14)
            }
        }
    }

    /// Where a lanes tile's B rows are: the tile's first column and the
    /// row stride of a row-major B, or the tile's first column in row 0's
    /// segment and the rows' offsets of a gathered one.
    #[derive(Clone, Copy)]
    pub(super) enum LaneRows {
        /// Row `k` at `p + k*rs`.
        Strided(*const f32, isize),
        /// Row `k` at `p + k*rs`, column `j` of it `j*cs` further.
        StridedCols(*const f32, isize, isize),
        /// Row `k` at `p + offs[k]`.
        Table(*const f32, *const i64),
        /// Row `k` at `p + offs[k]`, its columns from
        /// [`super::PAIRED_SEG`] on `delta` further (the next segment).
        TablePair(*const f32, *const i64, isize),
    }

    /// Row addressing for [`lanes_cols`], resolved at compile time.
    trait RowAt: Copy {
        /// Row `k`'s first column.
        unsafe fn at(&self, k: usize) -> *const f32;
        /// Hints row `k` (which may be past the last).
        unsafe fn prefetch(&self, k: usize);
        /// Column `j` of the row at `row`.
        #[inline(always)]
        unsafe fn col(&self, row: *const f32, j: usize) -> *const f32 {
            row.add(j)
        }
    }

    /// [`LaneRows::Strided`].
    #[derive(Clone, Copy)]
    struct StridedRows(*const f32, isize);

    impl RowAt for StridedRows {
        #[inline(always)]
        unsafe fn at(&self, k: usize) -> *const f32 {
            self.0.offset(k as isize * self.1)
        }
        #[inline(always)]
        unsafe fn prefetch(&self, k: usize) {
            _mm_prefetch::<_MM_HINT_T0>(self.0.wrapping_offset(k as isize * self.1) as *const i8);
        }
    }

    /// [`LaneRows::StridedCols`]. Its columns are separate streams (a
    /// fully-connected layer's batch rows, B's rows one float apart), each
    /// line serving sixteen k steps, which the hardware prefetcher follows:
    /// no hints.
    #[derive(Clone, Copy)]
    struct StridedColRows(*const f32, isize, isize);

    impl RowAt for StridedColRows {
        #[inline(always)]
        unsafe fn at(&self, k: usize) -> *const f32 {
            self.0.offset(k as isize * self.1)
        }
        #[inline(always)]
        unsafe fn prefetch(&self, _k: usize) {}
        #[inline(always)]
        unsafe fn col(&self, row: *const f32, j: usize) -> *const f32 {
            row.offset(j as isize * self.2)
        }
    }

    /// [`LaneRows::Table`] with its row count.
    #[derive(Clone, Copy)]
    struct TableRows(*const f32, *const i64, usize);

    /// [`LaneRows::TablePair`]: the columns from [`super::PAIRED_SEG`]
    /// on `.1` elements further.
    #[derive(Clone, Copy)]
    struct TablePairRows(TableRows, isize);

    impl RowAt for TablePairRows {
        #[inline(always)]
        unsafe fn at(&self, k: usize) -> *const f32 {
            self.0.at(k)
        }
        #[inline(always)]
        unsafe fn prefetch(&self, k: usize) {
            self.0.prefetch(k)
        }
        #[inline(always)]
        unsafe fn col(&self, row: *const f32, j: usize) -> *const f32 {
            if j < super::PAIRED_SEG {
                row.add(j)
            } else {
                row.offset(self.1).add(j)
            }
        }
    }

    impl RowAt for TableRows {
        #[inline(always)]
        unsafe fn at(&self, k: usize) -> *const f32 {
            self.0.offset(*self.1.add(k) as isize)
        }
        #[inline(always)]
        unsafe fn prefetch(&self, k: usize) {
            if k < self.2 {
                _mm_prefetch::<_MM_HINT_T0>(self.at(k) as *const i8);
            }
        }
    }

    /// [`lanes_tile`] for `N` columns.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn lanes_cols<const N: usize, R: RowAt>(
        k: usize,
        a: *const f32,
        b: R,
        c: *mut f32,
        (rows, cols): (usize, usize),
        (c_rs, c_cs): (isize, isize),
        acc: bool,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 14;
        debug_assert!(cols == N && N <= MR && rows <= 32);
        // The running total, column-major as the accumulators hold it:
        // `t[2j]`, `t[2j + 1]` = C rows 0-15 and 16-31 of column j.
        let mut t = [_mm512_setzero_ps(); 2 * MR];
        let tp = t.as_mut_ptr() as *mut f32;
        if acc {
            for j in 0..N {
                for l in 0..rows {
                    *tp.add(j * 32 + l) = *c.offset(l as isize * c_rs + j as isize * c_cs);
                }
            }
        }
        // A matrix-vector product (one column) streams A from memory once,
        // two FMAs per 128 bytes: it also prefetches A into L2 8 KiB
        // ahead, so more lines are in flight than the L1 prefetches keep
        // (FC layers at batch 1, in-model, 1 thread, medians of 7-9
        // alternating runs: MobileNet-V2's 1000 x 1280 0.326 -> 0.302 ms,
        // GoogLeNet's 1000 x 1024 0.340 -> 0.328, ResNet-18's 1000 x 512
        // 0.171 -> 0.157; MobileNet-V2's at 2 threads 0.121 -> 0.099).
        let l2 = N == 1;
        // The residual's lines the transposed store will read, hinted
        // before the k loop (each C row's run of the tile, its first and
        // last float): at batch 8 a residual comes from memory, and read
        // only at the store it stalled every row (ResNet-50's 256 -> 1024
        // expansions with their shortcut add).
        let ends = |l: usize| l * (N - 1);
        if let Some(e) = ep.filter(|e| !e.res.is_null() && e.res_cs == 1 && c_cs == 1) {
            hint_rows::<false>(e.res, e.res_rs, rows, 2, ends);
        }
        if c_cs == 1 {
            hint_rows::<true>(c, c_rs, rows, 2, ends);
        }
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            let mut c0 = [_mm512_setzero_ps(); N];
            let mut c1 = [_mm512_setzero_ps(); N];
            let mut ap = a.add(k0 * 32);
            for kk in k0..k0 + kc {
                // B's rows eight ahead, A (which streams from memory for
                // a model's filters) ~2 KiB ahead.
                b.prefetch(kk + 8);
                _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_PREFETCH) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_PREFETCH + 16) as *const i8);
                if l2 {
                    _mm_prefetch::<_MM_HINT_T1>(ap.wrapping_add(GEMV_L2_PREFETCH) as *const i8);
                    _mm_prefetch::<_MM_HINT_T1>(ap.wrapping_add(GEMV_L2_PREFETCH + 16) as *const i8);
                }
                let bp = b.at(kk);
                let a0 = _mm512_loadu_ps(ap);
                let a1 = _mm512_loadu_ps(ap.add(16));
                for j in 0..N {
                    let bj = _mm512_set1_ps(*b.col(bp, j));
                    c0[j] = _mm512_fmadd_ps(bj, a0, c0[j]);
                    c1[j] = _mm512_fmadd_ps(bj, a1, c1[j]);
                }
                ap = ap.add(32);
            }
            for j in 0..N {
                if k0 == 0 && !acc {
                    t[2 * j] = c0[j];
                    t[2 * j + 1] = c1[j];
                } else {
                    t[2 * j] = _mm512_add_ps(t[2 * j], c0[j]);
                    t[2 * j + 1] = _mm512_add_ps(t[2 * j + 1], c1[j]);
                }
            }
            k0 += kc;
        }
        // C's rows one float apart (C holds a fully-connected layer's
        // output transposed): each column's accumulators are its rows as
        // they lie in C, stored as they are.
        if c_rs == 1 && ep.is_none_or(|e| e.res.is_null() || e.res_rs == 1) {
            for half in 0..rows.div_ceil(16) {
                let live = (rows - 16 * half).min(16);
                let m: __mmask16 = ((1u32 << live) - 1) as u16;
                for j in 0..N {
                    let p = c.offset(16 * half as isize + j as isize * c_cs);
                    store_col16(t[2 * j + half], p, m, (16 * half, j), ep);
                }
            }
            return;
        }
        // Transpose: C row l is lane l of every column's accumulator.
        let res_unit = ep.is_none_or(|e| e.res.is_null() || e.res_cs == 1);
        if c_cs == 1 && res_unit {
            let cm: __mmask16 = (1u32 << N) as u16 - 1;
            for half in 0..rows.div_ceil(16) {
                let mut r = [_mm512_setzero_ps(); 16];
                for (j, v) in r.iter_mut().enumerate().take(N) {
                    *v = t[2 * j + half];
                }
                transpose16(&mut r);
                for (q, &v) in r.iter().enumerate().take(rows - 16 * half) {
                    let l = 16 * half + q;
                    store16(v, c.offset(l as isize * c_rs), cm, l, 0, true, ep);
                }
            }
        } else {
            for l in 0..rows {
                for j in 0..N {
                    let v = *tp.add(j * 32 + l);
                    let p = c.offset(l as isize * c_rs + j as isize * c_cs);
                    *p = match ep {
                        Some(e) => e.apply(l, j, v),
                        None => v,
                    };
                }
            }
        }
    }

    /// Transposes the 16 x 16 matrix whose row `i` is `r[i]` in place
    /// (row `i` becomes column `i`): 64 shuffles in four stages (32-bit
    /// and 64-bit interleaves within 128-bit lanes, then two rounds of
    /// 128-bit lane shuffles). [`lanes_cols`] stores its tiles with it: 32
    /// lane gathers a tile took ~2.5x as long.
    #[inline(always)]
    unsafe fn transpose16(r: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // u[4g + k]: rows 4g..4g + 4 of columns k, k + 4, k + 8, k + 12.
        let mut u = [_mm512_setzero_ps(); 16];
        for g in 0..4 {
            let (t0, t1, t2, t3) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
            u[4 * g] = _mm512_shuffle_ps::<0x44>(t0, t2);
            u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(t0, t2);
            u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(t1, t3);
            u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(t1, t3);
        }
        // v[8h + k] (k < 4): rows 8h..8h + 8 of columns k and k + 8;
        // v[8h + 4 + k]: of columns k + 4 and k + 12.
        let mut v = [_mm512_setzero_ps(); 16];
        for h in 0..2 {
            for k in 0..4 {
                let (a, b) = (u[8 * h + k], u[8 * h + 4 + k]);
                v[8 * h + k] = _mm512_shuffle_f32x4::<0x88>(a, b);
                v[8 * h + 4 + k] = _mm512_shuffle_f32x4::<0xDD>(a, b);
            }
        }
        for k in 0..8 {
            let (a, b) = (v[k], v[8 + k]);
            // v[k] and v[8 + k]: rows 0-7 and 8-15 of columns k and k + 8.
            r[k] = _mm512_shuffle_f32x4::<0x88>(a, b);
            r[k + 8] = _mm512_shuffle_f32x4::<0xDD>(a, b);
        }
    }

    /// One tile of an AVX2 lanes group ([`lanes_group_avx2`]): where its
    /// B rows are, its C, its columns (1 to [`super::LANE_COLS_AVX2`]) and
    /// its epilogue.
    #[derive(Clone, Copy)]
    pub(super) struct LaneTile {
        pub(super) src: LaneRows,
        pub(super) c: *mut f32,
        pub(super) cols: usize,
        pub(super) ep: Option<TileEp>,
    }

    /// The AVX2 lanes kernel: one or two C tiles of `rows <= 24` rows
    /// (three ymm lanes) by up to 4 columns, from one packed panel `a`
    /// (24 floats per k). k runs in `KC` blocks, each block's sums added
    /// to the tile's running total, the blocks of both tiles in turn, so
    /// the panel's block (24 KiB) streams from memory for the first tile
    /// and comes from L1 for the second: a fully-connected layer at batch
    /// 8 meets its weights once. Every element gets the additions, in the
    /// order, that [`micro_avx2`] gives it (bitwise the panels layout's
    /// results). The totals are stored through the epilogue, as vectors
    /// where C's rows are one float apart (a fully-connected layer's
    /// transposed output), else element by element.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn lanes_group_avx2(
        k: usize,
        a: *const f32,
        tiles: (LaneTile, Option<LaneTile>),
        rows: usize,
        cs: (isize, isize),
        acc: bool,
    ) {
        const L: usize = super::LANES_AVX2;
        let both = [Some(tiles.0), tiles.1];
        let mut tot = [[[_mm256_setzero_ps(); 3]; 4]; 2];
        if acc {
            for (t, tile) in tot.iter_mut().zip(both.iter().flatten()) {
                let mut buf = [0f32; L * 4];
                for j in 0..tile.cols {
                    for l in 0..rows {
                        buf[j * L + l] = *tile.c.offset(l as isize * cs.0 + j as isize * cs.1);
                    }
                }
                for (j, col) in t.iter_mut().enumerate() {
                    for (h, v) in col.iter_mut().enumerate() {
                        *v = _mm256_loadu_ps(buf.as_ptr().add(j * L + 8 * h));
                    }
                }
            }
        }
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            let first = k0 == 0 && !acc;
            let ab = a.add(k0 * L);
            for (t, tile) in tot.iter_mut().zip(both.iter().flatten()) {
                let blk = (kc, ab, k0, first);
                match tile.src {
                    LaneRows::Strided(p, rs) => {
                        lanes_block_cols(StridedRows(p, rs), tile.cols, blk, t)
                    }
                    LaneRows::StridedCols(p, rs, c) => {
                        lanes_block_cols(StridedColRows(p, rs, c), tile.cols, blk, t)
                    }
                    LaneRows::Table(p, offs) => {
                        lanes_block_cols(TableRows(p, offs, k), tile.cols, blk, t)
                    }
                    LaneRows::TablePair(p, offs, d) => {
                        lanes_block_cols(TablePairRows(TableRows(p, offs, k), d), tile.cols, blk, t)
                    }
                }
            }
            k0 += kc;
        }
        for (t, tile) in tot.iter().zip(both.iter().flatten()) {
            lanes_store_avx2(t, tile, rows, cs);
        }
    }

    /// [`lanes_block_avx2`] for a tile of `cols` columns.
    #[inline(always)]
    unsafe fn lanes_block_cols<R: RowAt>(
        b: R,
        cols: usize,
        blk: LaneBlock,
        t: &mut [[__m256; 3]; 4],
    ) {
        match cols {
            1 => lanes_block_avx2::<1, R>(b, blk, t),
            2 => lanes_block_avx2::<2, R>(b, blk, t),
            3 => lanes_block_avx2::<3, R>(b, blk, t),
            4 => lanes_block_avx2::<4, R>(b, blk, t),
            _ => unreachable!("AVX2 lanes tiles have 1 to 4 columns"),
        }
    }

    /// One k block of an AVX2 lanes tile: `kc` steps from `k0`, A's
    /// block, and whether it is the first.
    type LaneBlock = (usize, *const f32, usize, bool);

    /// One k block ([`LaneBlock`]) of an AVX2 lanes tile of `N` columns:
    /// its sums from zero, then the running total `t` set to them
    /// (`first`) or added to.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn lanes_block_avx2<const N: usize, R: RowAt>(
        b: R,
        (kc, a, k0, first): LaneBlock,
        t: &mut [[__m256; 3]; 4],
    ) {
        let mut c = [[_mm256_setzero_ps(); 3]; N];
        let mut ap = a;
        for kk in k0..k0 + kc {
            // B's rows eight ahead, A (which streams from memory for a
            // model's weights) ~2 KiB ahead, two lines per 96-byte step
            // (an L2 prefetch 32 or 128 KiB ahead measured no faster).
            b.prefetch(kk + 8);
            _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_PREFETCH) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(A_PREFETCH + 16) as *const i8);
            let bp = b.at(kk);
            let av = [
                _mm256_loadu_ps(ap),
                _mm256_loadu_ps(ap.add(8)),
                _mm256_loadu_ps(ap.add(16)),
            ];
            for (j, cj) in c.iter_mut().enumerate() {
                let bj = _mm256_broadcast_ss(&*b.col(bp, j));
                for (x, &v) in cj.iter_mut().zip(&av) {
                    *x = _mm256_fmadd_ps(v, bj, *x);
                }
            }
            ap = ap.add(super::LANES_AVX2);
        }
        for (tj, cj) in t.iter_mut().zip(&c) {
            for (x, &v) in tj.iter_mut().zip(cj) {
                *x = if first { v } else { _mm256_add_ps(*x, v) };
            }
        }
    }

    /// Stores an AVX2 lanes tile's totals `t` (column `j`'s rows in
    /// `t[j]`) through its epilogue: each column's rows as vectors when C's
    /// rows (and the residual's) are one float apart, else element by
    /// element (the same operations, [`TileEp::apply`]).
    #[inline(always)]
    unsafe fn lanes_store_avx2(
        t: &[[__m256; 3]; 4],
        tile: &LaneTile,
        rows: usize,
        (c_rs, c_cs): (isize, isize),
    ) {
        const L: usize = super::LANES_AVX2;
        let ep = tile.ep.as_ref();
        if c_rs == 1 && ep.is_none_or(|e| e.res.is_null() || e.res_rs == 1) {
            for (j, col) in t.iter().enumerate().take(tile.cols) {
                for (h, &sum) in col.iter().enumerate().take(rows.div_ceil(8)) {
                    let live = (rows - 8 * h).min(8);
                    let mut v = sum;
                    if let Some(e) = ep {
                        v = lanes_epilogue8(v, e, (8 * h, j), live);
                    }
                    store_n(tile.c.offset(j as isize * c_cs).add(8 * h), v, live);
                }
            }
            return;
        }
        let mut buf = [0f32; L * 4];
        for (j, col) in t.iter().enumerate() {
            for (h, &sum) in col.iter().enumerate() {
                _mm256_storeu_ps(buf.as_mut_ptr().add(j * L + 8 * h), sum);
            }
        }
        for l in 0..rows {
            for j in 0..tile.cols {
                let v = buf[j * L + l];
                let p = tile.c.offset(l as isize * c_rs + j as isize * c_cs);
                *p = match ep {
                    Some(e) => e.apply(l, j, v),
                    None => v,
                };
            }
        }
    }

    /// The epilogue of the `live` rows from `r` of lanes tile column `j`
    /// (bias, residual, clamp, activation: [`epilogue8`]'s operations,
    /// along rows), the residual's rows one float apart.
    #[inline(always)]
    unsafe fn lanes_epilogue8(
        mut v: __m256,
        e: &TileEp,
        (r, j): (usize, usize),
        live: usize,
    ) -> __m256 {
        if !e.bias.is_null() {
            v = _mm256_add_ps(v, load_n(e.bias.add(r), live));
        }
        if !e.res.is_null() {
            let p = e.res.offset(j as isize * e.res_cs).add(r);
            v = _mm256_add_ps(v, load_n(p, live));
        }
        if e.clamp {
            let (lo, hi) = (_mm256_set1_ps(e.lo), _mm256_set1_ps(e.hi));
            v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
        }
        match e.act {
            super::ACT_SIGMOID => sigmoid8(v),
            super::ACT_SILU => _mm256_mul_ps(v, sigmoid8(v)),
            super::ACT_GELU => gelu8(v),
            _ => v,
        }
    }

    /// One vector of a prologue row: `min(hi, max(lo, v · scale + shift))`,
    /// the product rounded before the add, as [`super::Prologue::apply`]
    /// computes each element (the packing paths all go through this, so
    /// they agree bitwise).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn prologue16(
        v: __m512,
        (scale, shift): (__m512, __m512),
        (lo, hi): (__m512, __m512),
    ) -> __m512 {
        let v = _mm512_add_ps(_mm512_mul_ps(v, scale), shift);
        _mm512_min_ps(hi, _mm512_max_ps(lo, v))
    }

    /// [`super::Prologue::apply`] on 16 lanes: the same product, add and
    /// clamp per element.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn prologue_rows_avx512(
        p: &super::Prologue,
        d: *mut f32,
        ld: usize,
        (k0, kc): (usize, usize),
        w: usize,
    ) {
        let (lo, hi) = (_mm512_set1_ps(p.lo), _mm512_set1_ps(p.hi));
        for kk in 0..kc {
            let a = _mm512_set1_ps(*p.scale.add(k0 + kk));
            let b = _mm512_set1_ps(*p.shift.add(k0 + kk));
            let row = d.add(kk * ld);
            let mut jj = 0;
            while jj < w {
                let m: __mmask16 = if w - jj >= 16 {
                    0xffff
                } else {
                    (1u32 << (w - jj)) as u16 - 1
                };
                let v = _mm512_maskz_loadu_ps(m, row.add(jj));
                _mm512_mask_storeu_ps(row.add(jj), m, prologue16(v, (a, b), (lo, hi)));
                jj += 16;
            }
        }
    }

    /// `rows` rows of 32 floats, `src_rs` apart, to `dst` (rows 32 apart),
    /// prefetching the next strip (the next 32 floats) 8 rows ahead, as
    /// the micro-kernels do for B read in place (a prefetch past the end
    /// of B does not fault).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn copy_rows_avx512(
        src: *const f32,
        src_rs: isize,
        dst: *mut f32,
        rows: usize,
    ) {
        for r in 0..rows {
            let s = src.offset(r as isize * src_rs);
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_offset(8 * src_rs + 32) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_offset(8 * src_rs + 48) as *const i8);
            let d = dst.add(r * 32);
            _mm512_storeu_ps(d, _mm512_loadu_ps(s));
            _mm512_storeu_ps(d.add(16), _mm512_loadu_ps(s.add(16)));
        }
    }

    /// `rows` rows of `w` floats (`src_rs` apart) into rows of `ld`
    /// floats (16 or 32) at `dst`, lanes from `w` on zero: masked loads
    /// never touch memory past a row's `w` floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pack_rows_avx512(
        src: *const f32,
        src_rs: isize,
        dst: *mut f32,
        ld: usize,
        rows: usize,
        w: usize,
    ) {
        let lane_mask = |from: usize| -> u16 {
            match w.saturating_sub(from) {
                0 => 0,
                n if n >= 16 => 0xffff,
                n => (1u16 << n) - 1,
            }
        };
        let (m0, m1) = (lane_mask(0), lane_mask(16));
        for r in 0..rows {
            let s = src.offset(r as isize * src_rs);
            let d = dst.add(r * ld);
            _mm512_storeu_ps(d, _mm512_maskz_loadu_ps(m0, s));
            if ld > 16 {
                _mm512_storeu_ps(d.add(16), _mm512_maskz_loadu_ps(m1, s.add(16)));
            }
        }
    }

    /// Rows `offs[0..kc]` (element offsets from `base`; B's rows `k0..k0
    /// + kc`) of a gathered B, `strips` whole 32-column strips of each
    /// from its first column, into the packed strips at `dst`
    /// (`[strip][row][32]`), row by row, so each row's `32 · strips`
    /// floats are read in order; with a prologue each element becomes
    /// [`super::Prologue::apply`]'s, by the same operations.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gather_row_strips_avx512(
        (base, offs): (*const f32, *const i64),
        (k0, kc): (usize, usize),
        strips: usize,
        dst: *mut f32,
        pro: Option<&super::Prologue>,
    ) {
        let step = kc * 32;
        let (lo, hi) = pro.map_or((0.0, 0.0), |p| (p.lo, p.hi));
        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
        for r in 0..kc {
            let row = base.wrapping_offset(*offs.add(r) as isize);
            let d = dst.add(r * 32);
            match pro {
                Some(p) => {
                    let a = _mm512_set1_ps(*p.scale.add(k0 + r));
                    let b = _mm512_set1_ps(*p.shift.add(k0 + r));
                    for jp in 0..strips {
                        for h in [0, 16] {
                            let v = _mm512_loadu_ps(row.add(jp * 32 + h));
                            _mm512_storeu_ps(d.add(jp * step + h), prologue16(v, (a, b), (lo, hi)));
                        }
                    }
                }
                None => {
                    for jp in 0..strips {
                        let s = row.add(jp * 32);
                        _mm512_storeu_ps(d.add(jp * step), _mm512_loadu_ps(s));
                        _mm512_storeu_ps(d.add(jp * step + 16), _mm512_loadu_ps(s.add(16)));
                    }
                }
            }
        }
    }

    /// One vector of a prologue row on 8 lanes, as [`prologue16`]: the
    /// product rounded, then the add, then the clamp, whose `max` and
    /// `min` return `v` itself when it is NaN (and `-0.0` against a bound
    /// of `0.0`), as the scalar clamp does, so they agree bitwise.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn prologue8(
        v: __m256,
        (scale, shift): (__m256, __m256),
        (lo, hi): (__m256, __m256),
    ) -> __m256 {
        let v = _mm256_add_ps(_mm256_mul_ps(v, scale), shift);
        _mm256_min_ps(hi, _mm256_max_ps(lo, v))
    }

    /// [`super::Prologue::apply`] on 8 lanes, the last partial vector's
    /// floats one at a time (the padding after `w` stays as it is).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn prologue_rows_avx2(
        p: &super::Prologue,
        d: *mut f32,
        ld: usize,
        (k0, kc): (usize, usize),
        w: usize,
    ) {
        let (lo, hi) = (_mm256_set1_ps(p.lo), _mm256_set1_ps(p.hi));
        for kk in 0..kc {
            let (sa, sb) = (*p.scale.add(k0 + kk), *p.shift.add(k0 + kk));
            let (a, b) = (_mm256_set1_ps(sa), _mm256_set1_ps(sb));
            let row = d.add(kk * ld);
            let whole = w / 8;
            for h in 0..whole {
                let q = row.add(8 * h);
                _mm256_storeu_ps(q, prologue8(_mm256_loadu_ps(q), (a, b), (lo, hi)));
            }
            for jj in 8 * whole..w {
                let q = row.add(jj);
                *q = super::clamp_keep_nan(*q * sa + sb, p.lo, p.hi);
            }
        }
    }

    /// [`gather_row_strips_avx512`] for the AVX2 kernel's 16-column
    /// strips: rows `offs[0..kc]` of a gathered B, `strips` whole strips
    /// of each from its first column, into `dst` (`[strip][row][16]`),
    /// row by row, each element through [`prologue8`] when there is a
    /// prologue.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn gather_row_strips_avx2(
        (base, offs): (*const f32, *const i64),
        (k0, kc): (usize, usize),
        strips: usize,
        dst: *mut f32,
        pro: Option<&super::Prologue>,
    ) {
        let step = kc * 16;
        let (lo, hi) = pro.map_or((0.0, 0.0), |p| (p.lo, p.hi));
        let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        for r in 0..kc {
            let row = base.wrapping_offset(*offs.add(r) as isize);
            let d = dst.add(r * 16);
            match pro {
                Some(p) => {
                    let a = _mm256_set1_ps(*p.scale.add(k0 + r));
                    let b = _mm256_set1_ps(*p.shift.add(k0 + r));
                    for jp in 0..strips {
                        for h in [0, 8] {
                            let v = _mm256_loadu_ps(row.add(jp * 16 + h));
                            _mm256_storeu_ps(d.add(jp * step + h), prologue8(v, (a, b), (lo, hi)));
                        }
                    }
                }
                None => {
                    for jp in 0..strips {
                        let s = row.add(jp * 16);
                        _mm256_storeu_ps(d.add(jp * step), _mm256_loadu_ps(s));
                        _mm256_storeu_ps(d.add(jp * step + 8), _mm256_loadu_ps(s.add(8)));
                    }
                }
            }
        }
    }

    /// Rows `offs[0..rows]` (element offsets from `base`) of a gathered B
    /// into rows of `ld` floats (16 or 32) at `dst`: each row's `runs`
    /// (source offset, destination column, length) are masked loads into
    /// the lanes they fill, the other lanes zero. A masked-off lane is
    /// never read, so a load whose lanes start before a run (its address
    /// below the run's) touches only the run.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gather_rows_avx512(
        base: *const f32,
        offs: *const i64,
        rows: usize,
        runs: &[(isize, usize, usize)],
        dst: *mut f32,
        ld: usize,
    ) {
        // Per 16-lane half of a destination row: (mask, source offset of
        // lane 0), at most one per run that reaches the half.
        let mut loads = [[(0u16, 0isize); 33]; 2];
        let mut nl = [0usize; 2];
        for (h, (l, n)) in loads.iter_mut().zip(nl.iter_mut()).enumerate() {
            let (lo, hi) = (16 * h, 16 * h + 16);
            for &(so, at, len) in runs {
                let (a, b) = (at.max(lo), (at + len).min(hi));
                if a < b {
                    let mask = (((1u32 << (b - lo)) - 1) & !((1u32 << (a - lo)) - 1)) as u16;
                    l[*n] = (mask, so - (at as isize - lo as isize));
                    *n += 1;
                }
            }
        }
        let halves = ld.div_ceil(16);
        let first = runs.first().map_or(0, |r| r.0);
        for r in 0..rows {
            if r + 8 < rows {
                let p = base.wrapping_offset(*offs.add(r + 8) as isize + first);
                _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
            }
            let row = base.wrapping_offset(*offs.add(r) as isize);
            let d = dst.add(r * ld);
            for h in 0..halves {
                let v = match &loads[h][..nl[h]] {
                    // A whole half from one run (the common case): a plain
                    // load.
                    &[(0xffff, o)] => _mm512_loadu_ps(row.wrapping_offset(o)),
                    l => {
                        let mut v = _mm512_setzero_ps();
                        for &(m, o) in l {
                            v = _mm512_mask_loadu_ps(v, m, row.wrapping_offset(o));
                        }
                        v
                    }
                };
                _mm512_storeu_ps(d.add(16 * h), v);
            }
        }
    }

    /// [`pack_rows_avx512`] for the AVX2 kernel's 16-float rows: whole
    /// 8-lane moves, the columns past the last whole one element by
    /// element (masked moves are slow on AMD Zen). The per-row `memmove`
    /// it replaces made packing B cost more than its GEMM on short-k
    /// shapes (AMD EPYC, `pgemm_shapes` with B packed: 96 x 12544 x 16
    /// 4.97-5.07 -> 2.90-2.95 ms, 1280 x 49 x 320 4.60 -> 2.67-3.16).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_rows_avx2(
        src: *const f32,
        src_rs: isize,
        dst: *mut f32,
        ld: usize,
        rows: usize,
        w: usize,
    ) {
        for r in 0..rows {
            let d = dst.add(r * ld);
            copy_floats_avx2(src.offset(r as isize * src_rs), d, w);
            for j in w..ld {
                *d.add(j) = 0.0;
            }
        }
    }

    /// One row of B (`w` floats at `src`) into the packed strips of the
    /// AVX2 kernel: its 16-float pieces `strip` floats apart from `dst`,
    /// the last zero-filled to 16.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_row_strips_avx2(
        src: *const f32,
        dst: *mut f32,
        strip: usize,
        w: usize,
    ) {
        let whole = w / 16;
        for jp in 0..whole {
            let (s, d) = (src.add(16 * jp), dst.add(strip * jp));
            _mm256_storeu_ps(d, _mm256_loadu_ps(s));
            _mm256_storeu_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
        }
        if w > 16 * whole {
            let (s, d) = (src.add(16 * whole), dst.add(strip * whole));
            let rest = w - 16 * whole;
            copy_floats_avx2(s, d, rest);
            for j in rest..16 {
                *d.add(j) = 0.0;
            }
        }
    }

    /// [`gather_rows_avx512`] for the AVX2 kernel: each run of each row
    /// copied as [`pack_rows_avx2`] copies a row.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn gather_rows_avx2(
        base: *const f32,
        offs: *const i64,
        rows: usize,
        runs: &[(isize, usize, usize)],
        dst: *mut f32,
        ld: usize,
    ) {
        let w = runs.last().map_or(0, |&(_, at, len)| at + len);
        if let [(so, 0, 16)] = runs {
            if ld == 16 {
                // A whole strip inside one segment (a strided conv's
                // im2col rows, a Concat's operand), the common case: two
                // moves a row, without the loop over runs (a stride-2 3x3
                // conv, 64 -> 128 on 56x56 at one thread on Zen 3: the
                // gather 11% of its time through the general loop).
                let base = base.wrapping_offset(*so);
                for r in 0..rows {
                    let s = base.wrapping_offset(*offs.add(r) as isize);
                    let d = dst.add(r * 16);
                    _mm256_storeu_ps(d, _mm256_loadu_ps(s));
                    _mm256_storeu_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
                }
                return;
            }
        }
        for r in 0..rows {
            let row = base.wrapping_offset(*offs.add(r) as isize);
            let d = dst.add(r * ld);
            for &(so, at, len) in runs {
                copy_floats_avx2(row.wrapping_offset(so), d.add(at), len);
            }
            for j in w..ld {
                *d.add(j) = 0.0;
            }
        }
    }

    /// Copies `len` floats: whole 8-lane moves, then element by element.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn copy_floats_avx2(s: *const f32, d: *mut f32, len: usize) {
        let whole = len / 8;
        for h in 0..whole {
            _mm256_storeu_ps(d.add(8 * h), _mm256_loadu_ps(s.add(8 * h)));
        }
        for j in 8 * whole..len {
            *d.add(j) = *s.add(j);
        }
    }

    /// [`copy_rows_avx512`] for rows of 16 floats (the AVX2 kernel's).
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn copy_rows_avx2(
        src: *const f32,
        src_rs: isize,
        dst: *mut f32,
        rows: usize,
    ) {
        for r in 0..rows {
            let s = src.offset(r as isize * src_rs);
            _mm_prefetch::<_MM_HINT_T0>(s.wrapping_add(16) as *const i8);
            let d = dst.add(r * 16);
            _mm256_storeu_ps(d, _mm256_loadu_ps(s));
            _mm256_storeu_ps(d.add(8), _mm256_loadu_ps(s.add(8)));
        }
    }

    /// [`super::sigmoid`] on 8 lanes, operation for operation. The clamps
    /// keep a NaN (`maxps`/`minps` return their second operand when
    /// either is NaN) and every later operation propagates it, so no
    /// compare-and-blend picks NaN lanes out at the end: on the AMD EPYC
    /// the blend doubled a sigmoid's cost (8 lanes: 25 -> 12 ns; SiLU
    /// 16 -> 13 ns), its result waiting on the division's long chain.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn horner8(x: __m256, c: &[f32]) -> __m256 {
        let mut acc = _mm256_set1_ps(c[0]);
        for &k in &c[1..] {
            acc = _mm256_add_ps(_mm256_mul_ps(acc, x), _mm256_set1_ps(k));
        }
        acc
    }

    /// [`super::gelu`] on eight lanes: the same operations (no fused
    /// multiply-adds, as the generated code has none), so bitwise the
    /// scalar version and the generated elementwise chain.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in crate::cpu) unsafe fn gelu8(v: __m256) -> __m256 {
        use super::erf;
        let x = _mm256_div_ps(v, _mm256_set1_ps(std::f32::consts::SQRT_2));
        let sign = _mm256_set1_ps(-0.0);
        let ax = _mm256_andnot_ps(sign, x);
        let z = _mm256_mul_ps(x, x);
        let p = _mm256_mul_ps(
            horner8(z, &erf::SERIES),
            _mm256_set1_ps(std::f32::consts::FRAC_2_SQRT_PI),
        );
        let small = _mm256_mul_ps(p, x);
        let one = _mm256_set1_ps(1.0);
        let t = _mm256_add_ps(_mm256_mul_ps(ax, _mm256_set1_ps(erf::T)), one);
        let t = _mm256_div_ps(one, t);
        let q = _mm256_mul_ps(horner8(t, &erf::AS), t);
        // exp(-z), as `exp_exact` (its argument is never NaN here).
        let nz = _mm256_xor_ps(z, sign);
        let hi = _mm256_set1_ps(erf::EXP_HI);
        let xc = _mm256_max_ps(_mm256_min_ps(nz, hi), _mm256_set1_ps(erf::EXP_LO));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(erf::LN2_HI)));
        let r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(erf::LN2_LO)));
        let e = _mm256_mul_ps(horner8(r, &super::sig::P), _mm256_mul_ps(r, r));
        let e = _mm256_add_ps(_mm256_add_ps(e, r), one);
        let ni = _mm256_cvttps_epi32(n);
        let n1 = _mm256_srai_epi32::<1>(ni);
        let n2 = _mm256_sub_epi32(ni, n1);
        let bias = _mm256_set1_epi32(127);
        let p1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let p2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        let ez = _mm256_mul_ps(_mm256_mul_ps(e, p1), p2);
        let ez = _mm256_blendv_ps(
            ez,
            _mm256_set1_ps(f32::INFINITY),
            _mm256_cmp_ps::<_CMP_GT_OQ>(nz, hi),
        );
        let q = _mm256_mul_ps(q, ez);
        let big = _mm256_or_ps(_mm256_sub_ps(one, q), _mm256_and_ps(x, sign));
        let r = _mm256_blendv_ps(
            big,
            small,
            _mm256_cmp_ps::<_CMP_LT_OQ>(ax, _mm256_set1_ps(erf::SMALL)),
        );
        let r = _mm256_blendv_ps(r, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x));
        _mm256_mul_ps(_mm256_mul_ps(v, _mm256_add_ps(r, one)), _mm256_set1_ps(0.5))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in crate::cpu) unsafe fn sigmoid8(v: __m256) -> __m256 {
        use super::sig;
        let x = _mm256_max_ps(_mm256_set1_ps(sig::LO), v);
        let x = _mm256_min_ps(_mm256_set1_ps(sig::HI), x);
        let magic = _mm256_set1_ps(sig::MAGIC);
        let y = _mm256_fmadd_ps(x, _mm256_set1_ps(sig::NLOG2E), magic);
        let n = _mm256_sub_ps(y, magic);
        let s = _mm256_fmadd_ps(n, _mm256_set1_ps(sig::LN2_HI), x);
        let s = _mm256_fmadd_ps(n, _mm256_set1_ps(sig::LN2_LO), s);
        let mut p = _mm256_set1_ps(sig::Q[0]);
        for &k in &sig::Q[1..] {
            p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(k));
        }
        let one = _mm256_set1_ps(1.0);
        let q = _mm256_sub_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(s, s), one), s);
        let scale = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_castps_si256(y)));
        _mm256_div_ps(one, _mm256_fmadd_ps(q, scale, one))
    }

    /// The steps of [`super::sigmoid`] (`ACT` [`super::ACT_SIGMOID`]) or
    /// SiLU on the `N` vectors of array `v`, each step across all of them
    /// before the next, with the given width's intrinsics: set1, setzero,
    /// min, max; fmadd, sub, mul, div; the casts to and from integer
    /// lanes and the shift. One definition for [`act8_n`] and
    /// [`act16_n`], so the two widths cannot drift apart. Plain loops, no
    /// closures: a closure does not inherit the target features, and the
    /// intrinsics in one not inlined become calls.
    macro_rules! sigmoid_steps {
        ($act:ident, $n:ident, $v:ident,
         ($set1:ident, $zero:ident, $min:ident, $max:ident),
         ($fmadd:ident, $sub:ident, $mul:ident, $div:ident),
         ($to_int:ident, $shl:ident, $to_float:ident)) => {{
            use super::sig;
            let (lo, hi) = ($set1(sig::LO), $set1(sig::HI));
            let magic = $set1(sig::MAGIC);
            let (mut x, mut y) = ([$zero(); $n], [$zero(); $n]);
            for i in 0..$n {
                x[i] = $min(hi, $max(lo, $v[i]));
            }
            for i in 0..$n {
                y[i] = $fmadd(x[i], $set1(sig::NLOG2E), magic);
            }
            let mut s = [$zero(); $n];
            for i in 0..$n {
                let n = $sub(y[i], magic);
                let t = $fmadd(n, $set1(sig::LN2_HI), x[i]);
                s[i] = $fmadd(n, $set1(sig::LN2_LO), t);
            }
            let mut p = [$set1(sig::Q[0]); $n];
            for &k in &sig::Q[1..] {
                for i in 0..$n {
                    p[i] = $fmadd(p[i], s[i], $set1(k));
                }
            }
            let one = $set1(1.0);
            let mut out = [$zero(); $n];
            for i in 0..$n {
                let q = $sub($fmadd(p[i], $mul(s[i], s[i]), one), s[i]);
                let scale = $to_float($shl::<23>($to_int(y[i])));
                let sgm = $div(one, $fmadd(q, scale, one));
                out[i] = if $act == super::ACT_SILU {
                    $mul($v[i], sgm)
                } else {
                    sgm
                };
            }
            out
        }};
    }

    /// [`sigmoid8`] (`ACT` [`super::ACT_SIGMOID`]) or SiLU
    /// ([`super::ACT_SILU`]) on `N` vectors, each step across all of them
    /// before the next: bitwise `sigmoid8` lane for lane, but `N`
    /// independent chains in flight where one vector at a time waits on
    /// its ~20-operation chain (division included) before the next
    /// starts. Another `ACT` returns `v` unchanged.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(in crate::cpu) unsafe fn act8_n<const ACT: u32, const N: usize>(
        v: [__m256; N],
    ) -> [__m256; N] {
        if ACT != super::ACT_SIGMOID && ACT != super::ACT_SILU {
            return v;
        }
        sigmoid_steps!(
            ACT,
            N,
            v,
            (
                _mm256_set1_ps,
                _mm256_setzero_ps,
                _mm256_min_ps,
                _mm256_max_ps
            ),
            (_mm256_fmadd_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps),
            (_mm256_castps_si256, _mm256_slli_epi32, _mm256_castsi256_ps)
        )
    }

    /// [`act8_n`] on `N` zmm vectors, sixteen lanes each: the same IEEE
    /// operations lane for lane, so bitwise its result, at half the
    /// instructions and with 32 registers for the chains and constants
    /// (a loop over L2-resident data measured ~8 cycles per eight lanes
    /// against 10-16 for `act8_n` on the Zen 4).
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn act16_n<const ACT: u32, const N: usize>(v: [__m512; N]) -> [__m512; N] {
        sigmoid_steps!(
            ACT,
            N,
            v,
            (
                _mm512_set1_ps,
                _mm512_setzero_ps,
                _mm512_min_ps,
                _mm512_max_ps
            ),
            (_mm512_fmadd_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps),
            (_mm512_castps_si512, _mm512_slli_epi32, _mm512_castsi512_ps)
        )
    }

    /// Activation `act` ([`super::ACT_SIGMOID`] or [`super::ACT_SILU`];
    /// another leaves the data) over the `n` floats at `p`, in place, in
    /// zmm registers (see [`activate_zmm_n`]). Bitwise the scalar
    /// [`super::activate`] (see [`act16_n`]).
    ///
    /// # Safety
    /// `p` must address `n` writable floats; the CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(in crate::cpu) unsafe fn activate_zmm(act: u32, p: *mut f32, n: usize) {
        match act {
            super::ACT_SIGMOID => activate_zmm_n::<{ super::ACT_SIGMOID }>(p, n),
            super::ACT_SILU => activate_zmm_n::<{ super::ACT_SILU }>(p, n),
            _ => {}
        }
    }

    /// [`activate_zmm`] for one activation: 64 floats at a time, the
    /// rest as one group of two or four zmm chains (a lone chain waits on
    /// itself), its last vectors masked.
    #[target_feature(enable = "avx512f")]
    unsafe fn activate_zmm_n<const ACT: u32>(p: *mut f32, n: usize) {
        let mut i = 0;
        while i < n {
            let left = n - i;
            if left > 32 {
                activate_zmm_group::<ACT, 4>(p.add(i), left);
            } else if left > 16 {
                activate_zmm_group::<ACT, 2>(p.add(i), left);
            } else {
                activate_zmm_group::<ACT, 1>(p.add(i), left);
            }
            i += 64;
        }
    }

    /// `N` zmm vectors of activation `ACT` from `p`, of which the first
    /// `left` floats exist: masked-off lanes are neither read nor
    /// written.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn activate_zmm_group<const ACT: u32, const N: usize>(p: *mut f32, left: usize) {
        let mask = |j: usize| {
            let lanes = left.saturating_sub(16 * j).min(16);
            ((1u32 << lanes) - 1) as __mmask16
        };
        let mut v = [_mm512_setzero_ps(); N];
        for (j, v) in v.iter_mut().enumerate() {
            *v = _mm512_maskz_loadu_ps(mask(j), p.add(16 * j));
        }
        for (j, v) in act16_n::<ACT, N>(v).iter().enumerate() {
            _mm512_mask_storeu_ps(p.add(16 * j), mask(j), *v);
        }
    }

    /// AVX2+FMA `6 x 16` micro-kernel: 12 ymm accumulators. A tile of
    /// at most 8 columns (a 7x7 map's 49th column, a narrow GEMM's last
    /// strip) runs the `6 x 8` half, [`micro_avx2_w`] with one ymm per
    /// row: the same lane arithmetic, so C is bitwise the same, without
    /// the multiply-adds of the dead half (1280 x 49 x 320: the one-column
    /// strip's full tile cost a third of the 48 columns' time).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn micro_avx2(
        kc: usize,
        a: *const f32,
        b: (*const f32, usize),
        c: *mut f32,
        (rows, cols): (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        macro_rules! rows {
            ($w:literal) => {
                match rows {
                    1 => micro_avx2_w::<1, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                    2 => micro_avx2_w::<2, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                    3 => micro_avx2_w::<3, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                    4 => micro_avx2_w::<4, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                    5 => micro_avx2_w::<5, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                    _ => micro_avx2_w::<6, $w>(kc, a, b, c, (rows, cols), cs, first, ep),
                }
            };
        }
        if cols <= 8 {
            rows!(1)
        } else {
            rows!(2)
        }
    }

    /// The `tiles` full-width (16-column) tiles of one 6-row A panel
    /// along a row of C, in one call: tile `t` reads B at `b + t *
    /// b_step` (rows `ldb` apart) and writes C from column `16 t`, each
    /// through [`tile_avx2`], the body of [`micro_avx2_w`] (the same FMA
    /// chains, so C is bitwise that of a call per tile). With a short k a tile is ~150 cycles of
    /// FMAs, and the per-tile dispatch and setup around each call cost a
    /// third of that (ShuffleNet-V2's 24 -> 58 1x1 conv on 56x56, 58 x
    /// 3136 x 24: 13% of its samples in the tile loop's driver alone).
    /// `hint`: each tile first hints its successor's C rows for writing,
    /// as the per-tile loop does (`Gemm::hint_c_tile`).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn strip_avx2(
        kc: usize,
        a: *const f32,
        (b, ldb, b_step): (*const f32, usize, usize),
        c: *mut f32,
        (rows, tiles): (usize, usize),
        c_rs: isize,
        (first, hint): (bool, bool),
        ep: Option<&TileEp>,
    ) {
        macro_rules! rows {
            ($($r:literal)*) => {
                match rows {
                    $($r => strip_avx2_r::<$r>(kc, a, (b, ldb, b_step), c, tiles, c_rs, (first, hint), ep),)*
                    _ => strip_avx2_r::<6>(kc, a, (b, ldb, b_step), c, tiles, c_rs, (first, hint), ep),
                }
            };
        }
        rows!(1 2 3 4 5)
    }

    /// The tiles of `panels.0` consecutive whole 6-row A panels (the
    /// first at `a.0`, each `a.1` floats past the last), then of a last
    /// panel of `panels.1` rows (none if 0), by one 16-column
    /// strip of B, in one call: C's tiles `c.1` rows apart from `c.0`,
    /// the epilogue's bias and residual moving with them. The strip-order
    /// GEMM (`Gemm::run_direct`) otherwise calls the kernel per panel. As
    /// that loop does, `hint` first hints each tile's successor in the
    /// next strip for writing, and `next = (b, rs, np)` spreads a
    /// prefetch of the next strip's `kc` rows (at `b`, `rs` apart) over
    /// the first `np - 1` panels. Each tile is [`tile_avx2`]'s, so C is
    /// bitwise that of a call per tile.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn column_avx2(
        kc: usize,
        (a, a_step): (*const f32, usize),
        b: (*const f32, usize),
        (c, c_rs): (*mut f32, isize),
        (panels, tail_rows): (usize, usize),
        (first, hint): (bool, bool),
        next: Option<(*const f32, isize, usize)>,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 6;
        let mut te = ep.copied();
        for q in 0..panels {
            if let Some((nb, rs, np)) = next.filter(|&(_, _, np)| q + 1 < np) {
                for kk in kc * q / (np - 1)..kc * (q + 1) / (np - 1) {
                    _mm_prefetch::<_MM_HINT_T1>(nb.offset(kk as isize * rs) as *const i8);
                }
            }
            let cp = c.offset((q * MR) as isize * c_rs);
            if hint {
                hint_rows::<true>(cp.add(16), c_rs, MR, 2, |l| 15 * l);
            }
            tile_avx2::<MR, 2>(
                kc,
                a.add(q * a_step),
                b,
                cp,
                (MR, 16),
                (c_rs, 1),
                first,
                te.as_ref(),
            );
            if let Some(e) = te.as_mut() {
                if !e.bias.is_null() {
                    e.bias = e.bias.add(MR);
                }
                if !e.res.is_null() {
                    e.res = e.res.offset(MR as isize * e.res_rs);
                }
            }
        }
        if tail_rows == 0 {
            return;
        }
        // The matrix's last panel, of `tail_rows` rows.
        let cp = c.offset((panels * MR) as isize * c_rs);
        if hint {
            hint_rows::<true>(cp.add(16), c_rs, tail_rows, 2, |l| 15 * l);
        }
        let a = a.add(panels * a_step);
        macro_rules! tail {
            ($($r:literal)*) => {
                match tail_rows {
                    $($r => tile_avx2::<$r, 2>(kc, a, b, cp, ($r, 16), (c_rs, 1), first, te.as_ref()),)*
                    _ => unreachable!("a tail panel has 1 to 5 rows"),
                }
            };
        }
        tail!(1 2 3 4 5)
    }

    /// [`strip_avx2`] for panels of `R` live rows.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn strip_avx2_r<const R: usize>(
        kc: usize,
        a: *const f32,
        (b, ldb, b_step): (*const f32, usize, usize),
        c: *mut f32,
        tiles: usize,
        c_rs: isize,
        (first, hint): (bool, bool),
        ep: Option<&TileEp>,
    ) {
        let mut te = ep.copied();
        for t in 0..tiles {
            let cp = c.add(16 * t);
            if hint && t + 1 < tiles {
                hint_rows::<true>(cp.add(16), c_rs, R, 2, |l| 15 * l);
            }
            tile_avx2::<R, 2>(
                kc,
                a,
                (b.add(t * b_step), ldb),
                cp,
                (R, 16),
                (c_rs, 1),
                first,
                te.as_ref(),
            );
            if let Some(e) = te.as_mut().filter(|e| !e.res.is_null()) {
                e.res = e.res.offset(16 * e.res_cs);
            }
        }
    }

    /// [`micro_avx2`] on `W` ymm (8 columns each) per row, for the first
    /// `R` rows of the 6-row panel: a last panel of fewer rows (16 rows
    /// are panels of 6, 6 and 4; 32 end in one of 2) issues no FMAs for
    /// its padding rows, the live rows' arithmetic unchanged.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn micro_avx2_w<const R: usize, const W: usize>(
        kc: usize,
        a: *const f32,
        b: (*const f32, usize),
        c: *mut f32,
        dims: (usize, usize),
        cs: (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        tile_avx2::<R, W>(kc, a, b, c, dims, cs, first, ep)
    }

    /// The body of [`micro_avx2_w`], always inlined (into it, and into
    /// [`strip_avx2_r`] and [`column_avx2`], whose loops of tiles then
    /// keep each tile's accumulators in registers, its full-tile store
    /// selected once). Callers enable `avx2,fma`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    unsafe fn tile_avx2<const R: usize, const W: usize>(
        kc: usize,
        a: *const f32,
        (b, ldb): (*const f32, usize),
        c: *mut f32,
        (rows, cols): (usize, usize),
        (c_rs, c_cs): (isize, isize),
        first: bool,
        ep: Option<&TileEp>,
    ) {
        const MR: usize = 6;
        let mut acc = [[_mm256_setzero_ps(); W]; R];
        // B read in place (row stride beyond the panel): fetch the same
        // row of the next column strip while this one is consumed, one
        // line per k (RegNetY's 32 -> 48 1x1 conv on 112x112 maps, 8
        // images: 12.5 -> 11.7 ms at one thread, 10 alternating pairs;
        // zoo models 0.97-1.01). Packed panels are read in order anyway.
        let pfb = if ldb > 8 * W { 8 * W } else { 0 };
        let (mut a, mut b) = (a, b);
        for _ in 0..kc {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH) as *const i8);
            if pfb > 0 {
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(pfb) as *const i8);
            }
            let mut bv = [_mm256_setzero_ps(); W];
            for (h, v) in bv.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(b.add(8 * h));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let ar = _mm256_broadcast_ss(&*a.add(r));
                for (x, &v) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(ar, v, *x);
                }
            }
            a = a.add(MR);
            b = b.add(ldb);
        }
        let res_unit = ep.is_none_or(|e| e.res.is_null() || e.res_cs == 1);
        if c_cs == 1 && cols == 8 * W && res_unit {
            if let Some(e) = ep.filter(|e| e.act == super::ACT_NONE) {
                match (e.bias.is_null(), e.res.is_null()) {
                    (false, true) => {
                        store_ep_avx2::<R, W, true, false>(&acc, c, rows, c_rs, first, e)
                    }
                    (false, false) => {
                        store_ep_avx2::<R, W, true, true>(&acc, c, rows, c_rs, first, e)
                    }
                    (true, true) => {
                        store_ep_avx2::<R, W, false, false>(&acc, c, rows, c_rs, first, e)
                    }
                    (true, false) => {
                        store_ep_avx2::<R, W, false, true>(&acc, c, rows, c_rs, first, e)
                    }
                }
                return;
            }
            for (r, row) in acc.iter().enumerate().take(rows) {
                let p = c.offset(r as isize * c_rs);
                for (h, &sum) in row.iter().enumerate() {
                    let p = p.add(8 * h);
                    let mut v = sum;
                    if !first {
                        v = _mm256_add_ps(_mm256_loadu_ps(p), v);
                    }
                    if let Some(e) = ep {
                        v = epilogue8(v, e, (r, h), |q| _mm256_loadu_ps(q));
                    }
                    _mm256_storeu_ps(p, v);
                }
            }
        } else if c_cs == 1 && res_unit {
            store_partial_avx2(&acc, c, (rows, cols), c_rs, first, ep);
        } else if c_rs == 1 && ep.is_none_or(|e| e.res.is_null() || e.res_rs == 1) {
            store_transposed_avx2(&acc, c, (rows, cols), c_cs, first, ep);
        } else {
            let mut t = [0f32; MR * 16];
            for (r, row) in acc.iter().enumerate() {
                for (h, &sum) in row.iter().enumerate() {
                    _mm256_storeu_ps(t.as_mut_ptr().add(r * 16 + 8 * h), sum);
                }
            }
            store_tile(&t, 16, c, (rows, cols), (c_rs, c_cs), first, ep);
        }
    }

    /// The epilogue of vector `h` of tile row `r` (as in `micro_avx512`:
    /// bias, residual, clamp, activation, in that order), the residual's
    /// eight floats read by `load` (a plain load in a full tile, a masked
    /// one in a partial tile's last vector).
    #[inline(always)]
    unsafe fn epilogue8(
        mut v: __m256,
        e: &TileEp,
        (r, h): (usize, usize),
        load: impl FnOnce(*const f32) -> __m256,
    ) -> __m256 {
        if !e.bias.is_null() {
            v = _mm256_add_ps(v, _mm256_set1_ps(*e.bias.add(r)));
        }
        if !e.res.is_null() {
            v = _mm256_add_ps(v, load(e.res.offset(r as isize * e.res_rs).add(8 * h)));
        }
        if e.clamp {
            let (lo, hi) = (_mm256_set1_ps(e.lo), _mm256_set1_ps(e.hi));
            v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
        }
        match e.act {
            super::ACT_SIGMOID => sigmoid8(v),
            super::ACT_SILU => _mm256_mul_ps(v, sigmoid8(v)),
            super::ACT_GELU => gelu8(v),
            _ => v,
        }
    }

    /// Stores a tile into a C stored transposed (`c_rs` = 1: each tile
    /// column's rows lie side by side, as in `Cᵀ = Bᵀ Aᵀ` for a MatMul
    /// whose weight is its right operand, a transformer's linear layers):
    /// the tile transposed in registers (8 x 8 at a time), then each
    /// column's rows as one vector, the epilogue's bias a vector of the
    /// rows' biases, its residual (transposed as C) and C's earlier sum
    /// loaded the same way. Element by element (`store_tile`), ViT-B/16's
    /// 197 x 768 -> 3072 layer ran at 45 GFLOP/s, its stores a scalar
    /// read-modify-write per element and k block. Each element takes the
    /// same operations as there, in the same order.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_transposed_avx2<const R: usize, const W: usize>(
        acc: &[[__m256; W]; R],
        c: *mut f32,
        (rows, cols): (usize, usize),
        c_cs: isize,
        first: bool,
        ep: Option<&TileEp>,
    ) {
        for h in 0..W {
            let mut col = [_mm256_setzero_ps(); 8];
            for (r, row) in acc.iter().enumerate() {
                col[r] = row[h];
            }
            crate::cpu::dw8::x86::transpose8(&mut col);
            for (jj, &sum) in col.iter().enumerate() {
                let j = 8 * h + jj;
                if j >= cols {
                    break;
                }
                let p = c.offset(j as isize * c_cs);
                let mut v = sum;
                if !first {
                    v = _mm256_add_ps(load_n(p, rows), v);
                }
                if let Some(e) = ep {
                    if !e.bias.is_null() {
                        v = _mm256_add_ps(v, load_n(e.bias, rows));
                    }
                    if !e.res.is_null() {
                        v = _mm256_add_ps(v, load_n(e.res.offset(j as isize * e.res_cs), rows));
                    }
                    if e.clamp {
                        let (lo, hi) = (_mm256_set1_ps(e.lo), _mm256_set1_ps(e.hi));
                        v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
                    }
                    v = match e.act {
                        super::ACT_SIGMOID => sigmoid8(v),
                        super::ACT_SILU => _mm256_mul_ps(v, sigmoid8(v)),
                        super::ACT_GELU => gelu8(v),
                        _ => v,
                    };
                }
                store_n(p, v, rows);
            }
        }
    }

    /// Stores a tile of unit-stride rows narrower than its `W` vectors
    /// (`cols < 8 W`): the full tile's operations in its order, the last
    /// vector's loads masked and its store split ([`load_n`],
    /// [`store_n`]). Through `store_tile`'s scalar loop, SqueezeNet's 16
    /// -> 64 3x3 conv on 55x55, whose F(4x4) frequency GEMMs are 14 tiles
    /// wide, spent 30% of its time storing them (0.83 -> 0.62 ms alone at
    /// one thread on the AMD EPYC Zen 3). Kept out of line so the full
    /// tiles' code stays as it was (inlined, every GEMM measured 3%
    /// slower).
    #[inline(never)]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_partial_avx2<const R: usize, const W: usize>(
        acc: &[[__m256; W]; R],
        c: *mut f32,
        (rows, cols): (usize, usize),
        c_rs: isize,
        first: bool,
        ep: Option<&TileEp>,
    ) {
        for (r, row) in acc.iter().enumerate().take(rows) {
            let p = c.offset(r as isize * c_rs);
            for (h, &sum) in row.iter().enumerate().take(cols.div_ceil(8)) {
                let (p, n) = (p.add(8 * h), cols - 8 * h);
                let mut v = sum;
                if !first {
                    v = _mm256_add_ps(load_n(p, n), v);
                }
                if let Some(e) = ep {
                    v = epilogue8(v, e, (r, h), |q| load_n(q, n));
                }
                store_n(p, v, n);
            }
        }
    }

    /// The first `n` floats at `p` (all eight from `n = 8` on) in a
    /// vector, the rest zero: a masked load, which unlike AMD's masked
    /// store is as cheap as a plain one.
    #[inline(always)]
    unsafe fn load_n(p: *const f32, n: usize) -> __m256 {
        if n >= 8 {
            _mm256_loadu_ps(p)
        } else {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), lanes);
            _mm256_maskload_ps(p, mask)
        }
    }

    /// Stores the first `n` lanes of `v` at `p` (all eight from `n = 8`
    /// on): a partial vector as 4-, 2- and 1-float pieces, since
    /// `vmaskmovps` to memory is microcoded on AMD's cores.
    #[inline(always)]
    unsafe fn store_n(p: *mut f32, v: __m256, n: usize) {
        if n >= 8 {
            _mm256_storeu_ps(p, v);
            return;
        }
        let (mut p, mut n, mut x) = (p, n, _mm256_castps256_ps128(v));
        if n >= 4 {
            _mm_storeu_ps(p, x);
            (p, n, x) = (p.add(4), n - 4, _mm256_extractf128_ps::<1>(v));
        }
        if n >= 2 {
            _mm_store_sd(p.cast(), _mm_castps_pd(x));
            (p, n, x) = (p.add(2), n - 2, _mm_movehl_ps(x, x));
        }
        if n == 1 {
            _mm_store_ss(p, x);
        }
    }

    /// Stores a full-width AVX2 tile whose epilogue has no activation (a
    /// conv + bias + Relu/Clip layer, or a projection + bias + residual):
    /// the operations and order of the general path, with the epilogue's
    /// fields read once and whether it has a bias (`BIAS`) and a residual
    /// (`RES`) fixed at compile time. Read through `TileEp` per vector,
    /// with its tests inside the row loop, the epilogue cost MobileNet-V2's
    /// 96 x 12544 x 16 expand conv a third of its time (AMD EPYC,
    /// `EP=bias,clamp pgemm_shapes`: 1.68-1.72 -> 1.40-1.48 ms; without
    /// an epilogue 1.24-1.27). Without a clamp the bounds are the
    /// infinities, which `max(lo, v)` and `min(hi, v)` pass every value
    /// through (NaN included, taken as the second operand), so C is
    /// bitwise that of the general path.
    #[inline(always)]
    unsafe fn store_ep_avx2<const R: usize, const W: usize, const BIAS: bool, const RES: bool>(
        acc: &[[__m256; W]; R],
        c: *mut f32,
        rows: usize,
        c_rs: isize,
        first: bool,
        e: &TileEp,
    ) {
        let (lo, hi) = if e.clamp {
            (_mm256_set1_ps(e.lo), _mm256_set1_ps(e.hi))
        } else {
            (
                _mm256_set1_ps(f32::NEG_INFINITY),
                _mm256_set1_ps(f32::INFINITY),
            )
        };
        let (bias, res, res_rs) = (e.bias, e.res, e.res_rs);
        for (r, row) in acc.iter().enumerate().take(rows) {
            let p = c.offset(r as isize * c_rs);
            let q = res.wrapping_offset(r as isize * res_rs);
            let bv = if BIAS {
                _mm256_set1_ps(*bias.add(r))
            } else {
                _mm256_setzero_ps()
            };
            for (h, &sum) in row.iter().enumerate() {
                let p = p.add(8 * h);
                let mut v = sum;
                if !first {
                    v = _mm256_add_ps(_mm256_loadu_ps(p), v);
                }
                if BIAS {
                    v = _mm256_add_ps(v, bv);
                }
                if RES {
                    v = _mm256_add_ps(v, _mm256_loadu_ps(q.add(8 * h)));
                }
                v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
                _mm256_storeu_ps(p, v);
            }
        }
    }

    /// The `W` columns (at most [`TAIL_COLS`](super::TAIL_COLS)) of one C column tile
    /// over `P` consecutive 6-row A panels at once, panel rows in the
    /// lanes: per k one 8-lane load of each panel (its six rows and two
    /// floats beyond, whose products nobody reads; the block's last k
    /// loads masked, as [`gemv_avx2`] does) against `W` broadcast B
    /// elements. A 7x7 map's 49th column through the `6 x 8` half tile
    /// costs 6 FMAs a k for 6 values; here one FMA does, and the `P * W`
    /// independent chains hide the FMA latency. Each element is the same
    /// chain of FMAs from zero over the block's k in order as the tile's,
    /// so C is bitwise the same. `out[q * W + w]` gets panel `q`'s column
    /// `w` (lanes 0-5).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tail_cols_avx2<const P: usize, const W: usize>(
        kc: usize,
        a: *const f32,
        (b, ldb): (*const f32, usize),
        out: &mut [[f32; 8]; 8],
    ) {
        const MR: usize = 6;
        let mask = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
        let mut acc = [[_mm256_setzero_ps(); W]; P];
        let step = |acc: &mut [[__m256; W]; P], kk: usize, whole: bool| {
            let mut bv = [_mm256_setzero_ps(); W];
            for (w, v) in bv.iter_mut().enumerate() {
                *v = _mm256_set1_ps(*b.add(kk * ldb + w));
            }
            for (q, row) in acc.iter_mut().enumerate() {
                let pa = a.add(q * kc * MR + kk * MR);
                let av = if whole {
                    _mm256_loadu_ps(pa)
                } else {
                    _mm256_maskload_ps(pa, mask)
                };
                for (x, &v) in row.iter_mut().zip(&bv) {
                    *x = _mm256_fmadd_ps(av, v, *x);
                }
            }
        };
        for kk in 0..kc.saturating_sub(1) {
            step(&mut acc, kk, true);
        }
        if kc > 0 {
            step(&mut acc, kc - 1, false);
        }
        for (q, row) in acc.iter().enumerate() {
            for (w, &sum) in row.iter().enumerate() {
                _mm256_storeu_ps(out[q * W + w].as_mut_ptr(), sum);
            }
        }
    }

    /// AVX-512 GEMV over one 14-row panel: four accumulators (k mod 4),
    /// masked 14-lane loads of the packed panel against broadcast `x[k]`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn gemv_avx512(
        a: *const f32,
        mp: usize,
        k: usize,
        p: usize,
        x: *const f32,
        x_s: isize,
        y: &mut [f32; 16],
    ) {
        const MR: usize = 14;
        let mask: __mmask16 = (1 << MR) - 1;
        let mut acc = [_mm512_setzero_ps(); 4];
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let pa = a.add(k0 * mp + p * kc * MR);
            let xb = x.offset(k0 as isize * x_s);
            let mut kk = 0;
            while kk + 4 <= kc {
                for (u, s) in acc.iter_mut().enumerate() {
                    let av = _mm512_maskz_loadu_ps(mask, pa.add((kk + u) * MR));
                    let xv = _mm512_set1_ps(*xb.offset((kk + u) as isize * x_s));
                    *s = _mm512_fmadd_ps(av, xv, *s);
                }
                kk += 4;
            }
            while kk < kc {
                let av = _mm512_maskz_loadu_ps(mask, pa.add(kk * MR));
                let xv = _mm512_set1_ps(*xb.offset(kk as isize * x_s));
                acc[0] = _mm512_fmadd_ps(av, xv, acc[0]);
                kk += 1;
            }
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_storeu_ps(y.as_mut_ptr(), s);
    }

    /// AVX2 GEMV over one 6-row panel: as [`gemv_avx512`] with masked
    /// 6-lane ymm loads.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn gemv_avx2(
        a: *const f32,
        mp: usize,
        k: usize,
        p: usize,
        x: *const f32,
        x_s: isize,
        y: &mut [f32; 16],
    ) {
        const MR: usize = 6;
        let mask = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
        let mut acc = [_mm256_setzero_ps(); 4];
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let pa = a.add(k0 * mp + p * kc * MR);
            let xb = x.offset(k0 as isize * x_s);
            // Whole 8-lane loads (the two lanes past the panel's six rows
            // are the next k's, their products land in lanes nobody reads)
            // for every k but the block's last, whose load would run past
            // the block: masked loads measured ~30 cycles each on AMD Zen
            // (a 1000 x 1280 FC layer 2.0-3.3 ms).
            let load = |i: usize| {
                if i + 1 < kc {
                    _mm256_loadu_ps(pa.add(i * MR))
                } else {
                    _mm256_maskload_ps(pa.add(i * MR), mask)
                }
            };
            let mut kk = 0;
            while kk + 4 <= kc {
                let pf = pa.wrapping_add(kk * MR + GEMV_AVX2_PREFETCH) as *const i8;
                _mm_prefetch::<_MM_HINT_T0>(pf);
                _mm_prefetch::<_MM_HINT_T0>(pf.wrapping_add(64));
                for (u, s) in acc.iter_mut().enumerate() {
                    let av = load(kk + u);
                    let xv = _mm256_set1_ps(*xb.offset((kk + u) as isize * x_s));
                    *s = _mm256_fmadd_ps(av, xv, *s);
                }
                kk += 4;
            }
            while kk < kc {
                let av = load(kk);
                let xv = _mm256_set1_ps(*xb.offset(kk as isize * x_s));
                acc[0] = _mm256_fmadd_ps(av, xv, acc[0]);
                kk += 1;
            }
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        _mm256_storeu_ps(y.as_mut_ptr(), s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::native::with_threads;

    /// The rayon pool the two-thread cases of these tests run on.
    fn two_thread_pool() -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
    }

    fn kernels() -> Vec<Kernel> {
        [Kernel::Avx512, Kernel::Avx2, Kernel::Portable]
            .into_iter()
            .filter(|k| k.supported())
            .collect()
    }

    fn val(i: usize, s: usize) -> f32 {
        ((i * s + 3) % 17) as f32 * 0.125 - 1.0
    }

    /// Asserts `c` is within the f64 product `want`'s rounding bound for
    /// a depth-`k` sum (`1e-4 sqrt(k)` relative, plus as much absolute),
    /// naming the case `what` when it is not.
    fn assert_near_f64(c: &[f32], want: &[f64], k: usize, what: &str) {
        for (q, (x, w)) in c.iter().zip(want).enumerate() {
            let tol = 1e-4 * (k as f64).sqrt() * (1.0 + w.abs());
            assert!((*x as f64 - w).abs() <= tol, "{what} [{q}]: {x} vs {w}");
        }
    }

    /// Runs one case on `kern` at `threads` threads; `tb`: B stored
    /// transposed; `tc`: C stored transposed.
    #[allow(clippy::too_many_arguments)]
    fn run_case(
        kern: Kernel,
        (m, n, k): (usize, usize, usize),
        tb: bool,
        tc: bool,
        acc: bool,
        threads: usize,
        pool: &rayon::ThreadPool,
    ) -> (Vec<f32>, Vec<f64>) {
        let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
        let b: Vec<f32> = (0..k * n).map(|i| val(i, 5)).collect();
        let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
        let (b_rs, b_cs) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let (c_rs, c_cs) = if tc { (1, m as isize) } else { (n as isize, 1) };
        let init = |i: usize| if acc { val(i, 3) } else { f32::NAN };
        let mut c: Vec<f32> = (0..m * n).map(init).collect();
        let rc = on_pool(pool, threads, || unsafe {
            dnnc_sgemm_packed(
                pa.as_ptr() as *const f32,
                m,
                n,
                k,
                b.as_ptr(),
                b_rs,
                b_cs,
                c.as_mut_ptr(),
                c_rs,
                c_cs,
                acc as usize,
            )
        });
        assert_eq!(rc, 0);
        let mut want = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let ci = (i as isize * c_rs + j as isize * c_cs) as usize;
                let mut s = if acc { init(ci) as f64 } else { 0.0 };
                for p in 0..k {
                    let bv = b[(p as isize * b_rs + j as isize * b_cs) as usize];
                    s += a[i * k + p] as f64 * bv as f64;
                }
                want[ci] = s;
            }
        }
        (c, want)
    }

    /// Every tail height of the last A panel (the AVX-512 and AVX2
    /// kernels compute only a tail's rows), B read in place (few panels): each C row
    /// matches the f64 reference and is bitwise the row the same A row
    /// gives inside a GEMM with enough panels to pack B.
    #[test]
    fn tail_panels_and_unpacked_b_match_full_packed_panels_bitwise() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let (n, k) = (70, 300);
        for kern in kernels() {
            let big = (kern.direct_b_panels() + 1) * kern.mr() + 3;
            let (full, _) = run_case(kern, (big, n, k), false, false, false, 1, &pool);
            for m in 1..28 {
                let (c, want) = run_case(kern, (m, n, k), false, false, false, 1, &pool);
                for (i, (x, w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (*x as f64 - w).abs() <= 1e-4 * (k as f64).sqrt() * (1.0 + w.abs()),
                        "{kern:?} m={m} [{i}]: {x} vs {w}"
                    );
                    assert_eq!(x.to_bits(), full[i].to_bits(), "{kern:?} m={m} [{i}]");
                }
            }
        }
    }

    /// A last column tile of one or two columns (the AVX2 column kernel,
    /// several panels a call) gives bitwise the columns a full tile gives
    /// when B has enough columns to fill it, and matches the f64
    /// reference: every panel count up to 21 (the kernel's groups of 8,
    /// 4, 2 and 1 panels), B read in place and packed (up to and past
    /// [`Kernel::direct_b_panels`]), k below and above the strip-order threshold
    /// and past one k block, at 1 and 2 threads.
    #[test]
    fn one_and_two_column_tails_match_full_tiles_bitwise() {
        let pool = two_thread_pool();
        for kern in kernels() {
            for n in [1usize + 16, 2 + 16, 1 + 48, 2 + 48] {
                let wide = n.next_multiple_of(16);
                for k in [5, 140, 300] {
                    for panels in panel_counts(
                        &[1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 21],
                        kern.direct_b_panels(),
                    ) {
                        let m = panels * kern.mr() - usize::from(panels % 2 == 1);
                        for threads in [1, 2] {
                            let (c, want) =
                                run_case(kern, (m, n, k), false, false, false, threads, &pool);
                            let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                            // The same B columns, then `wide - n` more.
                            let b: Vec<f32> = (0..k * wide)
                                .map(|q| {
                                    let (p, j) = (q / wide, q % wide);
                                    if j < n {
                                        val(p * n + j, 5)
                                    } else {
                                        val(q, 3)
                                    }
                                })
                                .collect();
                            let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                            let mut full = vec![f32::NAN; m * wide];
                            let rc = on_pool(&pool, threads, || unsafe {
                                packed_rm(&pa, (m, wide, k), b.as_ptr(), full.as_mut_ptr(), 0)
                            });
                            assert_eq!(rc, 0);
                            for (q, (x, w)) in c.iter().zip(&want).enumerate() {
                                let (i, j) = (q / n, q % n);
                                let at = format!("{kern:?} {m}x{n}x{k} t={threads} [{i},{j}]");
                                assert!(
                                    (*x as f64 - w).abs()
                                        <= 1e-4 * (k as f64).sqrt() * (1.0 + w.abs()),
                                    "{at}: {x} vs {w}"
                                );
                                assert_eq!(x.to_bits(), full[i * wide + j].to_bits(), "{at}");
                            }
                        }
                    }
                }
            }
        }
    }

    /// A gathered B (rows at scattered offsets of a source buffer, in
    /// segments of `seg_len` columns `seg_step` apart, the layout of an
    /// implicit im2col) matches the f64 reference and gives bitwise the C
    /// of the same B stored row-major,
    /// for every kernel: few and many A panels, k below and above the
    /// strip-order threshold and past one k block, segments of 1, 7, 14,
    /// 32 (whole 16-column strips), 40 and more columns than the GEMM
    /// has, strip order up to the
    /// default and the cached-C panel counts, with a fused epilogue and at
    /// 1 and 2 threads.
    #[test]
    fn gathered_b_matches_the_same_b_stored_row_major_bitwise() {
        let pool = two_thread_pool();
        for kern in kernels() {
            let shapes: [(usize, usize, usize); 5] = [
                (20, 70, 27),
                (64, 150, 147),
                (200, 45, 300),
                (5, 33, 9),
                (64, 150, 27),
            ];
            let strip_panels = [GATHER_STRIP_MAX_PANELS, GATHER_STRIP_MAX_PANELS_CACHED_C];
            for (&(m, n, k), most) in shapes.iter().flat_map(|s| strip_panels.map(|p| (s, p))) {
                for seg_len in [1usize, 7, 14, 32, 40, 1000] {
                    let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                    let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                    // Source: each row's segments `seg_step` apart, rows
                    // placed in reverse with gaps of NaN (never read).
                    let segs = n.div_ceil(seg_len);
                    let seg_step = seg_len as isize + 3;
                    let row_span = segs * seg_step as usize;
                    let mut src = vec![f32::NAN; (k + 1) * row_span + 5];
                    let row_off: Vec<i64> = (0..k)
                        .map(|p| ((k - 1 - p) * row_span + 5) as i64)
                        .collect();
                    let mut b = vec![0f32; k * n];
                    for p in 0..k {
                        for j in 0..n {
                            let v = val(p * n + j, 5);
                            b[p * n + j] = v;
                            let o = row_off[p] as usize
                                + (j / seg_len) * seg_step as usize
                                + j % seg_len;
                            src[o] = v;
                        }
                    }
                    let bias: Vec<f32> = (0..m).map(|i| val(i, 11)).collect();
                    let ep = Epilogue {
                        bias: bias.as_ptr(),
                        lo: 0.0,
                        ..Epilogue::NONE
                    };
                    let g = Gather {
                        base: src.as_ptr(),
                        row_off: row_off.as_ptr(),
                        seg_len,
                        seg_step,
                        strip_panels: most,
                    };
                    // Addresses as integers: the closures run on the pool.
                    let epp = &ep as *const Epilogue as usize;
                    let gp = &g as *const Gather as usize;
                    let pap = pa.as_ptr() as usize;
                    let bp = b.as_ptr() as usize;
                    let want = on_pool(&pool, 1, || unsafe {
                        let mut c = vec![f32::NAN; m * n];
                        let rc = dnnc_sgemm_packed(
                            pap as *const f32,
                            m,
                            n,
                            k,
                            bp as *const f32,
                            n as isize,
                            1,
                            c.as_mut_ptr(),
                            n as isize,
                            1,
                            epp,
                        );
                        assert_eq!(rc, 0);
                        c
                    });
                    for threads in [1, 2] {
                        let got = on_pool(&pool, threads, || unsafe {
                            let mut c = vec![f32::NAN; m * n];
                            let rc = dnnc_sgemm_packed_gather(
                                pap as *const f32,
                                m,
                                n,
                                k,
                                gp as *const Gather,
                                c.as_mut_ptr(),
                                n as isize,
                                1,
                                epp,
                            );
                            assert_eq!(rc, 0);
                            c
                        });
                        for (i, (x, w)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                x.to_bits(),
                                w.to_bits(),
                                "{kern:?} {m}x{n}x{k} seg {seg_len} strips to {most} panels T{threads} [{i}]: {x} vs {w}"
                            );
                            // And the f64 reference: relu(A·B + bias).
                            let (r, j) = (i / n, i % n);
                            let dot: f64 = (0..k)
                                .map(|p| a[r * k + p] as f64 * b[p * n + j] as f64)
                                .sum();
                            let f = (dot + bias[r] as f64).max(0.0);
                            assert!(
                                (*x as f64 - f).abs() <= 1e-4 * (k as f64).sqrt() * (1.0 + f.abs()),
                                "{kern:?} {m}x{n}x{k} seg {seg_len} [{i}]: {x} vs f64 {f}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// A prologue on a gathered B whose segments are whole 16- and
    /// 32-column strips (a batch's images read in place from a Concat's
    /// operands, each packed block spanning several of them) or are not
    /// (49 columns, a 7x7 map) gives bitwise the C of the plain GEMM on
    /// the transformed B stored row-major, for every kernel, blocks
    /// wider than one segment, k across `KC`, 1 and 2 threads.
    #[test]
    fn prologue_on_a_gathered_b_in_segments_matches_the_transformed_b_bitwise() {
        let pool = two_thread_pool();
        for kern in kernels() {
            for &(m, n, k, seg_len) in &[
                (40usize, 1568usize, 64usize, 32usize),
                (30, 640, 300, 16),
                (20, 392, 40, 49),
                (12, 3136, 24, 784),
            ] {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                let scale: Vec<f32> = (0..k).map(|i| 0.5 + val(i, 3).abs()).collect();
                let shift: Vec<f32> = (0..k).map(|i| val(i, 9)).collect();
                // Segments `seg_len + 5` apart in each row; rows reversed.
                let seg_step = seg_len as isize + 5;
                let row_span = n.div_ceil(seg_len) * seg_step as usize;
                let mut src = vec![f32::NAN; k * row_span];
                let row_off: Vec<i64> = (0..k).map(|p| ((k - 1 - p) * row_span) as i64).collect();
                let mut tb = vec![0f32; k * n];
                for p in 0..k {
                    for j in 0..n {
                        let v = if (p * n + j) % 89 == 3 {
                            -0.0
                        } else {
                            val(p * n + j, 5)
                        };
                        let o =
                            row_off[p] as usize + (j / seg_len) * seg_step as usize + j % seg_len;
                        src[o] = v;
                        tb[p * n + j] = (v * scale[p] + shift[p]).clamp(0.0, 6.0);
                    }
                }
                let plain = Epilogue::NONE;
                let with_pro = Epilogue {
                    pro: Prologue {
                        scale: scale.as_ptr(),
                        shift: shift.as_ptr(),
                        lo: 0.0,
                        hi: 6.0,
                    },
                    ..Epilogue::NONE
                };
                let g = Gather {
                    base: src.as_ptr(),
                    row_off: row_off.as_ptr(),
                    seg_len,
                    seg_step,
                    strip_panels: GATHER_STRIP_MAX_PANELS,
                };
                let (pap, tbp) = (pa.as_ptr() as usize, tb.as_ptr() as usize);
                let (gp, pp, wp) = (
                    &g as *const Gather as usize,
                    &plain as *const Epilogue as usize,
                    &with_pro as *const Epilogue as usize,
                );
                let want = on_pool(&pool, 1, || unsafe {
                    let mut c = vec![f32::NAN; m * n];
                    let rc = dnnc_sgemm_packed(
                        pap as *const f32,
                        m,
                        n,
                        k,
                        tbp as *const f32,
                        n as isize,
                        1,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                        pp,
                    );
                    assert_eq!(rc, 0);
                    bits_of(&c)
                });
                for threads in [1, 2] {
                    let got = on_pool(&pool, threads, || unsafe {
                        let mut c = vec![f32::NAN; m * n];
                        let rc = dnnc_sgemm_packed_gather(
                            pap as *const f32,
                            m,
                            n,
                            k,
                            gp as *const Gather,
                            c.as_mut_ptr(),
                            n as isize,
                            1,
                            wp,
                        );
                        assert_eq!(rc, 0);
                        bits_of(&c)
                    });
                    assert_eq!(
                        got, want,
                        "{kern:?} {m}x{n}x{k} segments of {seg_len} T{threads}"
                    );
                }
            }
        }
    }

    /// The epilogue stored from registers into a row-major C, into the
    /// same C transposed (the transposed vector stores) and into a C with
    /// neither stride one (`store_tile`'s element-by-element loop) gives
    /// bitwise the same numbers: with and without a bias and a clamp, with
    /// no activation, SiLU and GELU (`sigmoid16`/`gelu16` and
    /// `sigmoid8`/`gelu8` against the scalar `sigmoid` and `gelu`), for
    /// one k block and for several (the old C added before the
    /// epilogue), NaN kept by the clamp.
    #[test]
    fn register_epilogue_matches_the_scalar_epilogue_bitwise() {
        for kern in kernels() {
            for &(m, n, k) in &[(30usize, 70usize, 27usize), (14, 40, 300), (9, 33, 16)] {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 3)).collect();
                let mut b: Vec<f32> = (0..k * n).map(|i| val(i, 4)).collect();
                b[5] = f32::NAN;
                let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                let bias: Vec<f32> = (0..m).map(|i| val(i, 6)).collect();
                for (with_bias, clamp) in [(true, true), (true, false), (false, true)] {
                    for act in [ACT_NONE, ACT_SILU, ACT_GELU] {
                        let ep = Epilogue {
                            bias: if with_bias {
                                bias.as_ptr()
                            } else {
                                std::ptr::null()
                            },
                            lo: if clamp { 0.0 } else { f32::NEG_INFINITY },
                            hi: if clamp { 0.5 } else { f32::INFINITY },
                            act,
                            ..Epilogue::NONE
                        };
                        let epp = &ep as *const Epilogue as usize;
                        // Row-major, transposed, and every other float of
                        // every other row.
                        let layouts = [(n as isize, 1isize), (1, m as isize), (2 * n as isize, 2)];
                        let outs: Vec<Vec<f32>> = layouts
                            .iter()
                            .map(|&(rs, cs)| {
                                let mut c = vec![0f32; 2 * m * n];
                                let rc = unsafe {
                                    dnnc_sgemm_packed(
                                        pa.as_ptr() as *const f32,
                                        m,
                                        n,
                                        k,
                                        b.as_ptr(),
                                        n as isize,
                                        1,
                                        c.as_mut_ptr(),
                                        rs,
                                        cs,
                                        epp,
                                    )
                                };
                                assert_eq!(rc, 0);
                                (0..m * n)
                                    .map(|e| {
                                        let (i, j) = (e / n, e % n);
                                        c[(i as isize * rs + j as isize * cs) as usize]
                                    })
                                    .collect()
                            })
                            .collect();
                        for (e, &x) in outs[0].iter().enumerate() {
                            for (l, out) in outs.iter().enumerate().skip(1) {
                                assert_eq!(
                                    x.to_bits(),
                                    out[e].to_bits(),
                                    "{kern:?} {m}x{n}x{k} bias {with_bias} clamp {clamp} act {act} layout {l} [{}, {}]",
                                    e / n,
                                    e % n
                                );
                            }
                        }
                        assert!(
                            outs[0].iter().any(|v| v.is_nan()),
                            "the NaN did not reach C"
                        );
                    }
                }
            }
        }
    }

    /// A gathered B with segments of no columns is refused, C untouched.
    #[test]
    fn gathered_b_with_empty_segments_is_refused() {
        let pa = pack_a_with(Kernel::best(), 2, 2, &[1.0; 4], 2, 1, 1.0);
        let src = [1.0f32; 4];
        let offs = [0i64, 2];
        let g = Gather {
            base: src.as_ptr(),
            row_off: offs.as_ptr(),
            seg_len: 0,
            seg_step: 2,
            strip_panels: GATHER_STRIP_MAX_PANELS,
        };
        let mut c = [7.0f32; 4];
        let rc = unsafe {
            dnnc_sgemm_packed_gather(
                pa.as_ptr() as *const f32,
                2,
                2,
                2,
                &g,
                c.as_mut_ptr(),
                2,
                1,
                0,
            )
        };
        assert_eq!(rc, 2);
        assert_eq!(c, [7.0; 4]);
    }

    /// B read in place with its full strips copied to L1 scratch (3+ A
    /// panels, rows `COPY_STRIP_MIN_RS` or more apart; two k blocks, a
    /// partial last strip): every row matches the f64 reference and is
    /// bitwise the row a GEMM packing B gives, at 1 and 2 threads.
    #[test]
    fn copied_b_strips_match_packed_b_bitwise() {
        let pool = two_thread_pool();
        let (n, k) = (COPY_STRIP_MIN_RS as usize + 76, 300);
        for kern in kernels() {
            let most = kern.direct_b_panels();
            let big = (most + 1) * kern.mr() + 3;
            let (full, _) = run_case(kern, (big, n, k), false, false, false, 1, &pool);
            let counts = panel_counts(&[3, 4, 5, 8, most / 2], most);
            for p in counts.into_iter().filter(|&p| p <= most) {
                let m = p * kern.mr() - 1;
                let (c, want) = run_case(kern, (m, n, k), false, false, false, 1, &pool);
                let (two, _) = run_case(kern, (m, n, k), false, false, false, 2, &pool);
                for (i, (x, w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (*x as f64 - w).abs() <= 1e-4 * (k as f64).sqrt() * (1.0 + w.abs()),
                        "{kern:?} m={m} [{i}]: {x} vs {w}"
                    );
                    assert_eq!(x.to_bits(), full[i].to_bits(), "{kern:?} m={m} [{i}]");
                    assert_eq!(x.to_bits(), two[i].to_bits(), "{kern:?} m={m} [{i}]");
                }
            }
        }
    }

    #[test]
    fn packed_matches_f64_reference_on_edge_shapes() {
        let pool = two_thread_pool();
        let dims = [1usize, 2, 5, 13, 14, 15, 33, 65];
        let ks = [1usize, 3, 255, 256, 257, 600];
        for kern in kernels() {
            for &m in &dims {
                for &n in &dims {
                    for &k in &ks {
                        for (tb, tc, acc) in [
                            (false, false, false),
                            (true, false, true),
                            (false, true, false),
                        ] {
                            let (c, want) = run_case(kern, (m, n, k), tb, tc, acc, 1, &pool);
                            let what =
                                format!("{kern:?} m={m} n={n} k={k} tb={tb} tc={tc} acc={acc}");
                            assert_near_f64(&c, &want, k, &what);
                        }
                    }
                }
            }
        }
    }

    /// Rows of full-width tiles go through the AVX2 strip kernel (B in
    /// place with few panels, packed with many; k within one block and
    /// over two; partial last panels; C accumulated), columns of them in
    /// the strip order through the column kernel: each against the f64
    /// product.
    #[test]
    fn strips_of_tiles_match_f64_reference() {
        let pool = two_thread_pool();
        for kern in kernels() {
            for &(m, n, k) in &[
                (58usize, 80usize, 24usize),
                (40, 70, 300),
                (200, 70, 24),
                (200, 64, 300),
                // Strip order (k from `STRIP_ORDER_MIN_K`), a last
                // panel of 4 rows: the AVX2 column kernel.
                (100, 64, 200),
            ] {
                for acc in [false, true] {
                    let (c, want) = run_case(kern, (m, n, k), false, false, acc, 1, &pool);
                    assert_near_f64(&c, &want, k, &format!("{kern:?} {m}x{n}x{k} acc={acc}"));
                }
            }
        }
    }

    #[test]
    fn packed_two_threads_bitwise_equal_one() {
        let pool = two_thread_pool();
        for kern in kernels() {
            for &(m, n, k) in &[
                (64usize, 3136usize, 147usize),
                (512, 49, 4608),
                (1000, 1, 512),
                (37, 1000, 300),
            ] {
                for acc in [false, true] {
                    assert!(gemm_tasks(m, n, k, 2) > 1 || n == 1);
                    let (one, _) = run_case(kern, (m, n, k), false, false, acc, 1, &pool);
                    let (two, _) = run_case(kern, (m, n, k), false, false, acc, 2, &pool);
                    assert!(
                        one.iter()
                            .zip(&two)
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{kern:?} {m}x{n}x{k}"
                    );
                }
            }
        }
    }

    /// A batch of GEMMs (Winograd's per-frequency products) split across
    /// threads by whole GEMMs equals the same GEMMs called one by one,
    /// bitwise, and a header mismatch in any entry is reported.
    #[test]
    fn batched_gemms_split_by_whole_gemms_bitwise() {
        let pool = two_thread_pool();
        let (m, n, k, count) = (130usize, 49usize, 96usize, 16usize);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let mut packed: Vec<f32> = Vec::new();
        let mut stride = 0;
        for s in 0..count {
            let scaled: Vec<f32> = a.iter().map(|x| x * (1.0 + s as f32 * 0.01)).collect();
            let p = pack_a(m, k, &scaled, k, 1, 1.0);
            let v: Vec<f32> = p
                .as_bytes()
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
                .collect();
            stride = v.len();
            packed.extend(v);
        }
        let b: Vec<f32> = (0..count * k * n)
            .map(|i| ((i * 5) % 11) as f32 * 0.07 - 0.3)
            .collect();
        let single: Vec<f32> = {
            let mut c = vec![0f32; count * m * n];
            for s in 0..count {
                let rc = unsafe {
                    dnnc_sgemm_packed(
                        packed.as_ptr().add(s * stride),
                        m,
                        n,
                        k,
                        b.as_ptr().add(s * k * n),
                        n as isize,
                        1,
                        c.as_mut_ptr().add(s * m * n),
                        n as isize,
                        1,
                        0,
                    )
                };
                assert_eq!(rc, 0);
            }
            c
        };
        for threads in [1, 2] {
            let mut c = vec![f32::NAN; count * m * n];
            let rc = on_pool(&pool, threads, || unsafe {
                dnnc_sgemm_packed_batch(
                    packed.as_ptr(),
                    stride,
                    m,
                    n,
                    k,
                    b.as_ptr(),
                    k * n,
                    n as isize,
                    1,
                    c.as_mut_ptr(),
                    m * n,
                    n as isize,
                    1,
                    count,
                )
            });
            assert_eq!(rc, 0);
            assert!(
                c.iter()
                    .zip(&single)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{threads} threads"
            );
        }
        // A wrong stride lands on a non-header: an error, not garbage.
        let mut c = vec![0f32; count * m * n];
        let rc = unsafe {
            dnnc_sgemm_packed_batch(
                packed.as_ptr(),
                stride + 16,
                m,
                n,
                k,
                b.as_ptr(),
                k * n,
                n as isize,
                1,
                c.as_mut_ptr(),
                m * n,
                n as isize,
                1,
                count,
            )
        };
        assert_ne!(rc, 0);
    }

    /// `v` through the interpreter's Relu (`lo == 0`, `hi == inf`) or Clip
    /// (NaN handling included), or unchanged for an unbounded clamp.
    fn interp_clamp(v: Vec<f32>, lo: f32, hi: f32) -> Vec<f32> {
        let op = if lo == 0.0 && hi == f32::INFINITY {
            "Relu(%x)".to_string()
        } else if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
            return v;
        } else {
            format!("Clip(%x) {{min={lo}, max={hi}}}")
        };
        let src = format!(
            "graph g {{\ninput %x: f32[{}]\n%y = {op}\noutput %y\n}}\n",
            v.len()
        );
        let g = dnnc_ir::text::parse(&src, "t.dnn").unwrap();
        let x = dnnc_ir::Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![v.len()], v).unwrap());
        match crate::run(&g, &[("x".to_string(), x)]).unwrap().remove(0) {
            dnnc_ir::Tensor::F32(a) => a.iter().copied().collect(),
            t => panic!("{t:?}"),
        }
    }

    /// The epilogue's [`sigmoid`] against `1 / (1 + e^-x)` in f64: within
    /// 2e-7 relative (or 1e-37 absolute where the result underflows) from
    /// -200 to 200, exact at the ends, NaN for NaN.
    #[test]
    fn sigmoid_matches_f64() {
        let mut xs: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 0.005).collect();
        xs.extend([
            1e-30, -1e-30, 0.0, -0.0, 87.5, -87.5, 88.5, -88.5, 1e30, -1e30,
        ]);
        for x in xs {
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            let got = sigmoid(x) as f64;
            let err = (got - want).abs();
            assert!(
                err <= 2e-7 * want || err <= 1e-37,
                "sigmoid({x}) = {got}, want {want}"
            );
        }
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), sigmoid(-1e30));
        assert!(sigmoid(f32::NEG_INFINITY) < 1e-37);
        assert!(sigmoid(f32::NAN).is_nan());
    }

    /// The epilogue's [`gelu`] against `x (1 + erf(x / sqrt 2)) / 2` in
    /// f64: within erf's 1.5e-7 times `|x|` plus 1e-6 relative from -12
    /// to 12 and at the extremes; NaN for NaN, the limits at the infinities;
    /// the AVX2 `gelu8` and AVX-512 `gelu16` bitwise the scalar version,
    /// lane by lane, across the series/rational switch and the extremes;
    /// an unknown activation refused.
    #[test]
    fn gelu_matches_f64_and_its_vector_form_bitwise() {
        let mut xs: Vec<f32> = (-24_000..=24_000).map(|i| i as f32 * 0.0005).collect();
        xs.extend([
            1e-30, -1e-30, 0.0, -0.0, 1.0606601, -1.0606601, 1.0606602, 30.0, -30.0, 1e30, -1e30,
        ]);
        for &x in &xs {
            let xd = x as f64;
            let want = xd * 0.5 * (1.0 + libm_erf(xd / std::f64::consts::SQRT_2));
            let got = gelu(x) as f64;
            // erf's error (A&S 7.1.26: 1.5e-7) times |x| / 2, and f32
            // rounding of the result.
            assert!(
                (got - want).abs() <= 1.5e-7 * xd.abs() + 1e-6 * want.abs() + 1e-37,
                "gelu({x}) = {got}, want {want}"
            );
        }
        assert!(gelu(f32::NAN).is_nan());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        #[cfg(target_arch = "x86_64")]
        if Kernel::best() != Kernel::Portable {
            xs.extend([f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
            for chunk in xs.chunks(8) {
                let mut lanes = [0f32; 8];
                lanes[..chunk.len()].copy_from_slice(chunk);
                let mut out = [0f32; 8];
                unsafe {
                    use std::arch::x86_64::*;
                    let v = x86::gelu8(_mm256_loadu_ps(lanes.as_ptr()));
                    _mm256_storeu_ps(out.as_mut_ptr(), v);
                }
                for (x, y) in lanes.iter().zip(out) {
                    assert_eq!(gelu(*x).to_bits(), y.to_bits(), "gelu8({x})");
                }
            }
        }
        // The AVX-512 `gelu16` bitwise the scalar version too.
        #[cfg(target_arch = "x86_64")]
        if Kernel::best() == Kernel::Avx512 {
            for chunk in xs.chunks(16) {
                let mut lanes = [0f32; 16];
                lanes[..chunk.len()].copy_from_slice(chunk);
                let mut out = [0f32; 16];
                unsafe {
                    use std::arch::x86_64::*;
                    let v = x86::gelu16(_mm512_loadu_ps(lanes.as_ptr()));
                    _mm512_storeu_ps(out.as_mut_ptr(), v);
                }
                for (x, y) in lanes.iter().zip(out) {
                    assert_eq!(gelu(*x).to_bits(), y.to_bits(), "gelu16({x})");
                }
            }
        }
        assert!(act_supported(ACT_GELU) && act_supported(ACT_SILU));
        assert!(!act_supported(ACT_GELU + 1));
    }

    /// `erf` in f64 to ~1e-15: its Maclaurin-type series
    /// `2/sqrt(pi) e^(-x^2) sum (2x^2)^n x / (2n+1)!!` below 3, `1 -
    /// erfc` by its continued fraction above.
    fn libm_erf(x: f64) -> f64 {
        // Series for |x| < 3, continued fraction beyond: both to ~1e-15.
        let ax = x.abs();
        let r = if ax < 3.0 {
            let mut sum = ax;
            let mut term = ax;
            let x2 = ax * ax;
            let mut n = 0.0;
            loop {
                n += 1.0;
                term *= 2.0 * x2 / (2.0 * n + 1.0);
                sum += term;
                if term <= 1e-17 * sum || n > 400.0 {
                    break;
                }
            }
            2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum
        } else {
            // erfc by Lentz's continued fraction.
            let mut f = 0.0f64;
            for n in (1..=60).rev() {
                f = (n as f64 / 2.0) / (ax + f);
            }
            1.0 - (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f)
        };
        r.copysign(x)
    }

    /// A prologue on B's rows (B as strides, or gathered through a row
    /// table) gives bitwise the C of the plain GEMM on
    /// the transformed B (`B[kk, j] * scale[kk] + shift[kk]`, clamped),
    /// for every kernel, shapes with partial panels and tails, k across
    /// `KC`, few A panels (whose B is otherwise read in place), 1 and 2
    /// threads, with and without an epilogue; NaN and -0.0 in B. Calls a
    /// prologue cannot serve (n = 1, a lanes-packed A) return the
    /// mismatch code and leave C untouched.
    #[test]
    fn prologue_matches_the_gemm_of_the_transformed_b_bitwise() {
        let pool = two_thread_pool();
        let shapes = [
            (40usize, 196usize, 64usize),
            (90, 49, 300),
            (16, 400, 24),
            (70, 81, 32),
            (200, 33, 520),
            (150, 320, 300),
        ];
        let inf = f32::INFINITY;
        for kern in kernels() {
            for &(m, n, k) in &shapes {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                // One NaN (column 5 of C is NaN) and a few -0.0: a NaN
                // every few rows would make every column of C NaN.
                let b: Vec<f32> = (0..k * n)
                    .map(|i| match (i, i % 97) {
                        (5, _) => f32::NAN,
                        (_, 6) => -0.0,
                        _ => val(i, 5),
                    })
                    .collect();
                // Scales whose products round, so a fused multiply-add
                // in place of the rounded product would show.
                let scale: Vec<f32> = (0..k)
                    .map(|i| 0.5 + val(i, 3).abs() + (i % 7) as f32 * 0.0371)
                    .collect();
                let shift: Vec<f32> = (0..k).map(|i| val(i, 9)).collect();
                let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                let bias: Vec<f32> = (0..m).map(|i| val(i, 11)).collect();
                for (lo, hi) in [(-inf, inf), (0.0, inf), (0.0, 6.0)] {
                    let tb: Vec<f32> = b
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| {
                            let v = x * scale[i / n] + shift[i / n];
                            if v < lo {
                                lo
                            } else if v > hi {
                                hi
                            } else {
                                v
                            }
                        })
                        .collect();
                    for with_bias in [false, true] {
                        let mut ep = Epilogue {
                            bias: if with_bias {
                                bias.as_ptr()
                            } else {
                                std::ptr::null()
                            },
                            ..Epilogue::NONE
                        };
                        let gemm = |bm: &[f32], ep: &Epilogue, threads: usize| {
                            let mut c = vec![f32::NAN; m * n];
                            let epp = ep as *const Epilogue as usize;
                            let rc = on_pool(&pool, threads, || unsafe {
                                packed_rm(&pa, (m, n, k), bm.as_ptr(), c.as_mut_ptr(), epp)
                            });
                            assert_eq!(rc, 0);
                            bits_of(&c)
                        };
                        let want = gemm(&tb, &ep, 1);
                        ep.pro = Prologue {
                            scale: scale.as_ptr(),
                            shift: shift.as_ptr(),
                            lo,
                            hi,
                        };
                        // B's rows stored in reverse order and gathered back
                        // through a row table, as a 1x1 conv reads the
                        // operands of an absorbed Concat.
                        let rev: Vec<f32> = (0..k)
                            .rev()
                            .flat_map(|r| b[r * n..][..n].to_vec())
                            .collect();
                        let offs: Vec<i64> = (0..k).map(|r| ((k - 1 - r) * n) as i64).collect();
                        let gathered = |ep: &Epilogue, threads: usize| {
                            let mut c = vec![f32::NAN; m * n];
                            let epp = ep as *const Epilogue as usize;
                            let rc = on_pool(&pool, threads, || unsafe {
                                let g = Gather {
                                    base: rev.as_ptr(),
                                    row_off: offs.as_ptr(),
                                    seg_len: n,
                                    seg_step: 0,
                                    strip_panels: GATHER_STRIP_MAX_PANELS,
                                };
                                let ap = pa.as_ptr() as *const f32;
                                dnnc_sgemm_packed_gather(
                                    ap,
                                    m,
                                    n,
                                    k,
                                    &g,
                                    c.as_mut_ptr(),
                                    n as isize,
                                    1,
                                    epp,
                                )
                            });
                            assert_eq!(rc, 0);
                            bits_of(&c)
                        };
                        for threads in [1, 2] {
                            assert_eq!(
                                gemm(&b, &ep, threads),
                                want,
                                "{kern:?} {m}x{n}x{k} clamp [{lo}, {hi}] bias {with_bias} T{threads}"
                            );
                            assert_eq!(
                                gathered(&ep, threads),
                                want,
                                "gathered {kern:?} {m}x{n}x{k} clamp [{lo}, {hi}] bias {with_bias} T{threads}"
                            );
                        }
                    }
                }
            }
        }
        // Refused: a matrix-vector product, and (AVX-512) a lanes A.
        let (m, k) = (32, 40);
        let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
        let b: Vec<f32> = (0..k * 20).map(|i| val(i, 5)).collect();
        let scale = vec![1.0f32; k];
        let shift = vec![0.0f32; k];
        let ep = Epilogue {
            pro: Prologue {
                scale: scale.as_ptr(),
                shift: shift.as_ptr(),
                lo: 0.0,
                hi: inf,
            },
            ..Epilogue::NONE
        };
        let mut packs = vec![(pack_a(m, k, &a, k, 1, 1.0), 1usize)];
        if lanes_supported() {
            packs.push((pack_a_for(Layout::Lanes, m, k, &a, k, 1, 1.0), 20));
        }
        for (pa, n) in packs {
            let mut c = vec![7.0f32; m * n];
            let epp = &ep as *const Epilogue as usize;
            let rc = unsafe { packed_rm(&pa, (m, n, k), b.as_ptr(), c.as_mut_ptr(), epp) };
            assert_eq!(rc, 1, "n = {n}");
            assert!(c.iter().all(|&v| v == 7.0), "C written");
        }
    }

    fn bits_of(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// [`dnnc_sgemm_packed`] on a row-major `k x n` B and `m x n` C.
    ///
    /// # Safety
    /// `pa` packs an `m x k` A; `b` and `c` hold `k * n` and `m * n`
    /// floats; `ep` is 0, 1 or the address of a valid [`Epilogue`].
    unsafe fn packed_rm(
        pa: &AlignedBuf,
        (m, n, k): (usize, usize, usize),
        b: *const f32,
        c: *mut f32,
        ep: usize,
    ) -> i32 {
        dnnc_sgemm_packed(
            pa.as_ptr() as *const f32,
            m,
            n,
            k,
            b,
            n as isize,
            1,
            c,
            n as isize,
            1,
            ep,
        )
    }

    /// The fused epilogue equals the plain GEMM followed by the bias and
    /// residual adds, the interpreter's Relu/Clip and the scalar
    /// [`sigmoid`] activations, bitwise (NaN for NaN), on every kernel, for
    /// every combination of bias, residual (row-major and transposed),
    /// clamp and activation,
    /// on tails, several k blocks, the GEMV path and k = 0, at 1 and 2
    /// threads.
    #[test]
    fn fused_epilogue_matches_separate_pass_bitwise() {
        let pool = two_thread_pool();
        let shapes = [
            (14usize, 32usize, 7usize),
            (15, 33, 300),
            (14, 16, 300),
            (29, 48, 257),
            (5, 8, 3),
            (5, 13, 1),
            (37, 70, 257),
            (96, 1, 40),
            (3, 17, 0),
            (64, 600, 64),
            // Over `direct_b_panels` A panels (B packed): the AVX2 strip
            // kernel's packed-B tiles.
            (200, 70, 40),
        ];
        let inf = f32::INFINITY;
        let clamps = [
            (-inf, inf, ACT_NONE),
            (0.0, inf, ACT_NONE),
            (0.0, 6.0, ACT_NONE),
            (-0.5, 0.25, ACT_NONE),
            (-inf, inf, ACT_SIGMOID),
            (-inf, inf, ACT_SILU),
            (-0.5, 0.25, ACT_SILU),
        ];
        for kern in kernels() {
            for &(m, n, k) in &shapes {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                let b: Vec<f32> = (0..k * n).map(|i| val(i, 5)).collect();
                let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                // NaN, -0.0 and values that cancel the product to zero.
                let bias: Vec<f32> = (0..m)
                    .map(|i| match i % 5 {
                        3 => f32::NAN,
                        4 => -0.0,
                        _ => val(i, 11),
                    })
                    .collect();
                let res: Vec<f32> = (0..m * n)
                    .map(|i| if i % 29 == 7 { f32::NAN } else { val(i, 13) })
                    .collect();
                let gemm = |ep: usize, c: &mut Vec<f32>, threads: usize| {
                    let rc = on_pool(&pool, threads, || unsafe {
                        packed_rm(&pa, (m, n, k), b.as_ptr(), c.as_mut_ptr(), ep)
                    });
                    assert_eq!(rc, 0);
                };
                let mut plain = vec![f32::NAN; m * n];
                gemm(0, &mut plain, 1);
                for (ub, ur, tr) in [
                    (false, false, false),
                    (true, false, false),
                    (false, true, false),
                    (true, true, false),
                    (true, true, true),
                ] {
                    for &(lo, hi, act) in &clamps {
                        let (rrs, rcs) = if tr { (1, m as isize) } else { (n as isize, 1) };
                        // R stored transposed when `tr`.
                        let rbuf: Vec<f32> = if tr {
                            (0..m * n).map(|q| res[(q % m) * n + q / m]).collect()
                        } else {
                            res.clone()
                        };
                        let ep = Epilogue {
                            bias: if ub { bias.as_ptr() } else { std::ptr::null() },
                            res: if ur { rbuf.as_ptr() } else { std::ptr::null() },
                            res_rs: rrs,
                            res_cs: rcs,
                            lo,
                            hi,
                            act,
                            pro: Prologue::NONE,
                        };
                        let sums: Vec<f32> = (0..m * n)
                            .map(|q| {
                                let (i, j) = (q / n, q % n);
                                let v = if ub { plain[q] + bias[i] } else { plain[q] };
                                if ur {
                                    v + res[i * n + j]
                                } else {
                                    v
                                }
                            })
                            .collect();
                        let want: Vec<f32> = interp_clamp(sums, lo, hi)
                            .into_iter()
                            .map(|v| activate(act, v))
                            .collect();
                        for threads in [1, 2] {
                            let mut c = vec![f32::NAN; m * n];
                            gemm(&ep as *const Epilogue as usize, &mut c, threads);
                            for (q, (x, w)) in c.iter().zip(&want).enumerate() {
                                assert!(
                                    x.to_bits() == w.to_bits() || (x.is_nan() && w.is_nan()),
                                    "{kern:?} {m}x{n}x{k} bias={ub} res={ur} tr={tr} \
                                     [{lo}, {hi}] act={act} t={threads} at {q}: {x} vs {w}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// `f` on `pool`, native splits using `threads` threads.
    /// Panel counts `base` plus the in-place limit `most` and one past it,
    /// each once (with AVX-512's limit of 8 they overlap `base`).
    fn panel_counts(base: &[usize], most: usize) -> Vec<usize> {
        let mut v: Vec<usize> = base.iter().copied().chain([most, most + 1]).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn on_pool<T: Send>(
        pool: &rayon::ThreadPool,
        threads: usize,
        f: impl FnOnce() -> T + Send,
    ) -> T {
        pool.install(|| with_threads(threads, f))
    }

    /// The kernels with a lanes kernel that this machine runs (AVX-512's
    /// and AVX2's).
    fn lanes_kernels() -> Vec<Kernel> {
        [Kernel::Avx512, Kernel::Avx2]
            .into_iter()
            .filter(|k| k.supported())
            .collect()
    }

    /// Whether this machine runs a lanes kernel (else the calling test
    /// says it is skipped).
    fn lanes_supported() -> bool {
        let on = !lanes_kernels().is_empty();
        if !on {
            eprintln!(
                "skipped: the lanes layout needs AVX2+FMA or AVX-512F, which this machine lacks"
            );
        }
        on
    }

    /// Runs `run` (C for a packed A and a thread count) on `a` (`m x k`),
    /// for each lanes kernel, packed for its panels kernel at 1 thread and
    /// in its lanes layout at 1 and 2 threads, and asserts the lanes
    /// results bitwise equal (NaN for NaN).
    fn lanes_equal_panels(
        what: &str,
        (m, k): (usize, usize),
        a: &[f32],
        run: impl Fn(&AlignedBuf, usize) -> Vec<f32>,
    ) {
        for kern in lanes_kernels() {
            let want = run(&pack_a_with(kern, m, k, a, k, 1, 1.0), 1);
            let lanes = pack_lanes_with(kern, m, k, a, k, 1, 1.0);
            for threads in [1, 2] {
                let got = run(&lanes, threads);
                for (q, (x, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        x.to_bits() == w.to_bits() || (x.is_nan() && w.is_nan()),
                        "{what} {kern:?} t={threads} at {q}: {x} vs {w}"
                    );
                }
            }
        }
    }

    /// The lanes layout against the panels layout, which the other tests
    /// check against f64 references: bitwise equal C for m around the
    /// 8-, 16-, 24- and 32-lane boundaries, n around the 4- and 14-column
    /// tiles, k below, at and past one `KC` block; plain, accumulating and
    /// with the fused epilogue (bias with NaN and -0.0, residual with NaN,
    /// clamps, SiLU), C
    /// and R row-major or transposed, B row-major or transposed (read by
    /// its column stride, as a fully-connected layer's batch rows are),
    /// 1 and 2 threads. A header for another shape is the mismatch error.
    #[test]
    fn lanes_layout_matches_panels_layout_bitwise() {
        if !lanes_supported() {
            return;
        }
        let pool = two_thread_pool();
        let mut cases = 0;
        for m in [1usize, 5, 16, 17, 24, 25, 32, 33, 70] {
            for n in [2usize, 4, 7, 8, 14, 15, 29, 49] {
                for k in [1usize, 7, 256, 300, 600] {
                    let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                    let b: Vec<f32> = (0..k * n).map(|i| val(i, 5)).collect();
                    // The same B stored transposed: element (p, j) at j*k + p.
                    let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
                    let bias: Vec<f32> = (0..m)
                        .map(|i| match i % 5 {
                            3 => f32::NAN,
                            4 => -0.0,
                            _ => val(i, 11),
                        })
                        .collect();
                    let res: Vec<f32> = (0..m * n)
                        .map(|i| if i % 29 == 7 { f32::NAN } else { val(i, 13) })
                        .collect();
                    // Modes 0-3: B row-major; 4 and 5: B transposed, C
                    // transposed (a fully-connected layer) or not.
                    for mode in 0..6 {
                        let tc = mode == 3 || mode == 4;
                        let (bp, b_rs, b_cs) = if mode >= 4 {
                            (bt.as_ptr() as usize, 1, k as isize)
                        } else {
                            (b.as_ptr() as usize, n as isize, 1)
                        };
                        let (c_rs, c_cs) = if tc { (1, m as isize) } else { (n as isize, 1) };
                        let ep = Epilogue {
                            bias: bias.as_ptr(),
                            res: res.as_ptr(),
                            res_rs: if tc { 1 } else { n as isize },
                            res_cs: if tc { m as isize } else { 1 },
                            lo: if mode == 2 { 0.0 } else { -0.5 },
                            hi: if mode == 2 { f32::INFINITY } else { 0.25 },
                            act: if mode == 2 { ACT_SILU } else { ACT_NONE },
                            pro: Prologue::NONE,
                        };
                        let epv = match mode {
                            0 | 1 => mode,
                            5 => 1,
                            _ => &ep as *const Epilogue as usize,
                        };
                        let run = |pa: &AlignedBuf, threads: usize| {
                            let mut c: Vec<f32> = (0..m * n).map(|i| val(i, 3)).collect();
                            let rc = on_pool(&pool, threads, || unsafe {
                                dnnc_sgemm_packed(
                                    pa.as_ptr() as *const f32,
                                    m,
                                    n,
                                    k,
                                    bp as *const f32,
                                    b_rs,
                                    b_cs,
                                    c.as_mut_ptr(),
                                    c_rs,
                                    c_cs,
                                    epv,
                                )
                            });
                            assert_eq!(rc, 0, "{m}x{n}x{k} mode {mode}");
                            c
                        };
                        lanes_equal_panels(&format!("{m}x{n}x{k} mode {mode}"), (m, k), &a, run);
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 9 * 8 * 5 * 6);
        let (m, n, k) = (40, 9, 20);
        let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
        let b = vec![1f32; k * n];
        let mut c = vec![0f32; m * n];
        let pa = pack_a_for(Layout::Lanes, m, k, &a, k, 1, 1.0);
        let ap = pa.as_ptr() as *const f32;
        let rc = unsafe {
            dnnc_sgemm_packed(
                ap,
                m + 1,
                n,
                k,
                b.as_ptr(),
                n as isize,
                1,
                c.as_mut_ptr(),
                n as isize,
                1,
                0,
            )
        };
        assert_eq!(rc, 1, "a header for another m must be refused");
    }

    /// A matrix-vector product (a fully-connected layer at batch 1: B one
    /// column read with a column stride, C written transposed) through
    /// the lanes layout: bitwise the panels layout's GEMV, with a fused
    /// bias and clamp, at 1 and 2 threads.
    #[test]
    fn lanes_layout_matrix_vector_matches_the_panels_gemv() {
        if !lanes_supported() {
            return;
        }
        let pool = two_thread_pool();
        for m in [1usize, 31, 33, 1000] {
            for k in [1usize, 300, 600] {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                let x: Vec<f32> = (0..k).map(|i| val(i, 5)).collect();
                let bias: Vec<f32> = (0..m).map(|i| val(i, 11)).collect();
                let ep = Epilogue {
                    bias: bias.as_ptr(),
                    lo: 0.0,
                    hi: 6.0,
                    ..Epilogue::NONE
                };
                let (xp, epp) = (x.as_ptr() as usize, &ep as *const Epilogue as usize);
                let run = |pa: &AlignedBuf, threads: usize| {
                    let pap = pa.as_ptr() as usize;
                    let (c, rc) = on_pool(&pool, threads, || unsafe {
                        let mut c = vec![f32::NAN; m];
                        let rc = dnnc_sgemm_packed(
                            pap as *const f32,
                            m,
                            1,
                            k,
                            xp as *const f32,
                            1,
                            k as isize,
                            c.as_mut_ptr(),
                            1,
                            m as isize,
                            epp,
                        );
                        (c, rc)
                    });
                    assert_eq!(rc, 0, "{m}x1x{k}");
                    c
                };
                lanes_equal_panels(&format!("{m}x1x{k}"), (m, k), &a, run);
            }
        }
    }

    /// A gathered B (segments of 1 to 1000 columns, gaps between them,
    /// rows out of order) through the lanes layout, whose tiles stay
    /// inside a segment: bitwise the panels layout's C on the same gather,
    /// with a fused epilogue, at 1 and 2 threads.
    #[test]
    fn lanes_layout_reads_gathered_b_as_the_panels_layout() {
        if !lanes_supported() {
            return;
        }
        let pool = two_thread_pool();
        let shapes: [(usize, usize, usize); 4] =
            [(40, 49, 300), (33, 70, 27), (64, 15, 600), (5, 9, 7)];
        for &(m, n, k) in &shapes {
            for seg_len in [1usize, 5, 7, 13, 14, 15, 30, 1000] {
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                let segs = n.div_ceil(seg_len);
                let seg_step = seg_len as isize + 3;
                let row_span = segs * seg_step as usize;
                let mut src = vec![f32::NAN; (k + 1) * row_span + 5];
                let row_off: Vec<i64> = (0..k)
                    .map(|p| ((k - 1 - p) * row_span + 5) as i64)
                    .collect();
                for (p, &ro) in row_off.iter().enumerate() {
                    for j in 0..n {
                        let o = ro as usize + (j / seg_len) * seg_step as usize + j % seg_len;
                        src[o] = val(p * n + j, 5);
                    }
                }
                let bias: Vec<f32> = (0..m).map(|i| val(i, 11)).collect();
                let res: Vec<f32> = (0..m * n).map(|i| val(i, 13)).collect();
                let ep = Epilogue {
                    bias: bias.as_ptr(),
                    res: res.as_ptr(),
                    res_rs: n as isize,
                    res_cs: 1,
                    lo: 0.0,
                    hi: f32::INFINITY,
                    act: ACT_NONE,
                    pro: Prologue::NONE,
                };
                let g = Gather {
                    base: src.as_ptr(),
                    row_off: row_off.as_ptr(),
                    seg_len,
                    seg_step,
                    strip_panels: GATHER_STRIP_MAX_PANELS,
                };
                // Addresses as integers: the closures run on the pool.
                let (gp, epp) = (
                    &g as *const Gather as usize,
                    &ep as *const Epilogue as usize,
                );
                let run = |pa: &AlignedBuf, threads: usize| {
                    let pap = pa.as_ptr() as usize;
                    let (c, rc) = on_pool(&pool, threads, || unsafe {
                        let mut c = vec![f32::NAN; m * n];
                        let rc = dnnc_sgemm_packed_gather(
                            pap as *const f32,
                            m,
                            n,
                            k,
                            gp as *const Gather,
                            c.as_mut_ptr(),
                            n as isize,
                            1,
                            epp,
                        );
                        (c, rc)
                    });
                    assert_eq!(rc, 0, "{m}x{n}x{k} seg {seg_len}");
                    c
                };
                lanes_equal_panels(&format!("{m}x{n}x{k} seg {seg_len}"), (m, k), &a, run);
            }
        }
    }

    /// The layout rule on shapes measured both ways (`LAYOUT=lanes
    /// pgemm_shapes`, hot, GFLOP/s panels → lanes): lanes where the panels
    /// kernel wastes lanes on a small map, panels where it wastes none or
    /// k is too short to pay for the transposed stores; without AVX-512,
    /// lanes only for 2 to 8 columns with AVX2.
    #[test]
    fn layout_rule_follows_the_measured_shapes() {
        let lanes = [
            (320, 49, 960),  // 166 → 211
            (960, 49, 160),  // 171 → 201
            (128, 49, 128),  // 155 → 191
            (64, 49, 64),    // 151 → 171
            (96, 196, 576),  // 197 → 223
            (128, 196, 128), // 182 → 202
            (1000, 1, 1280), // a matrix-vector product, cold: 220 → 179 µs
        ];
        let panels = [
            (144, 3136, 24),  // 148 → 110
            (144, 784, 32),   // 160 → 135
            (256, 169, 64),   // 188 → 173
            (96, 169, 64),    // 185 → 176
            (64, 784, 64),    // 189 → 178
            (512, 16, 512),   // 208 → 190
            (1000, 169, 512), // cold: 206 → 195
            (10, 1, 512),     // a matrix-vector product, 32 rows for 14
        ];
        let avx512 = Kernel::best() == Kernel::Avx512;
        for (m, n, k) in lanes {
            let want = if avx512 {
                Layout::Lanes
            } else {
                Layout::Panels
            };
            assert_eq!(Layout::choose(m, n, k), want, "{m}x{n}x{k}");
        }
        for (m, n, k) in panels {
            assert_eq!(Layout::choose(m, n, k), Layout::Panels, "{m}x{n}x{k}");
        }
        // AVX2: lanes from 2 to 8 columns (batch-8 fully-connected layers,
        // ResNet-50's 1000 x 8 x 2048 hot: 56 -> 91 GFLOP/s), where the
        // panels tile keeps 6 FMA chains.
        if Kernel::best() == Kernel::Avx2 {
            for n in [2usize, 4, 8] {
                assert_eq!(Layout::choose(1000, n, 2048), Layout::Lanes, "n = {n}");
                assert_eq!(Layout::choose_cold(1000, n, 2048), Layout::Lanes, "n = {n}");
            }
            for n in [1usize, 9, 16, 49] {
                assert_eq!(Layout::choose(1000, n, 2048), Layout::Panels, "n = {n}");
            }
            assert_eq!(Layout::choose_segments(64, 8, 576, 4), Layout::Panels);
        }
    }

    /// N = 1..=48 around the 16 and 32 column-block boundaries: the
    /// narrow AVX-512 kernel (column blocks <= 16) matches the f64
    /// reference, and equals the masked wide kernel bitwise, with and
    /// without a fused epilogue, strided B/C, accumulation, at 1 and 2
    /// threads. Other kernels ignore the switch and are checked against
    /// the reference too.
    #[test]
    fn narrow_kernel_matches_reference_and_masked_wide_bitwise() {
        let pool = two_thread_pool();
        let run = |narrow: bool, f: &dyn Fn() -> (Vec<f32>, Vec<f64>)| {
            set_narrow(narrow);
            let r = f();
            set_narrow(true);
            r
        };
        for kern in kernels() {
            for n in 1..=48usize {
                for &(m, k) in &[(14usize, 3usize), (29, 257), (5, 64)] {
                    for (tb, tc, acc) in [
                        (false, false, false),
                        (true, false, true),
                        (false, true, false),
                    ] {
                        for threads in [1, 2] {
                            let case = || run_case(kern, (m, n, k), tb, tc, acc, threads, &pool);
                            let (nar, want) = run(true, &case);
                            let (wide, _) = run(false, &case);
                            let what = format!(
                                "{kern:?} m={m} n={n} k={k} tb={tb} tc={tc} acc={acc} t={threads}"
                            );
                            assert_near_f64(&nar, &want, k, &what);
                            assert!(
                                nar.iter()
                                    .zip(&wide)
                                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                                "{what}: narrow != masked wide"
                            );
                        }
                    }
                }
                // Fused epilogue (bias + row-major or transposed residual +
                // clamp), narrow vs masked wide, at 1 and 2 threads.
                let (m, k) = (29usize, 300usize);
                let a: Vec<f32> = (0..m * k).map(|i| val(i, 7)).collect();
                let b: Vec<f32> = (0..k * n).map(|i| val(i, 5)).collect();
                let pa = pack_a_with(kern, m, k, &a, k, 1, 1.0);
                let bias: Vec<f32> = (0..m)
                    .map(|i| if i % 7 == 3 { f32::NAN } else { val(i, 11) })
                    .collect();
                let res: Vec<f32> = (0..m * n).map(|i| val(i, 13)).collect();
                for (ub, ur, tr, (lo, hi)) in [
                    (true, false, false, (0.0, f32::INFINITY)),
                    (false, true, false, (f32::NEG_INFINITY, f32::INFINITY)),
                    (true, true, false, (0.0, 6.0)),
                    (true, true, true, (-0.5, 0.25)),
                ] {
                    let (rrs, rcs) = if tr { (1, m as isize) } else { (n as isize, 1) };
                    let ep = Epilogue {
                        bias: if ub { bias.as_ptr() } else { std::ptr::null() },
                        res: if ur { res.as_ptr() } else { std::ptr::null() },
                        res_rs: rrs,
                        res_cs: rcs,
                        lo,
                        hi,
                        act: ACT_NONE,
                        pro: Prologue::NONE,
                    };
                    let epa = &ep as *const Epilogue as usize;
                    let mut outs = Vec::new();
                    for narrow in [true, false] {
                        for threads in [1, 2] {
                            let mut c = vec![f32::NAN; m * n];
                            set_narrow(narrow);
                            let rc = on_pool(&pool, threads, || unsafe {
                                dnnc_sgemm_packed(
                                    pa.as_ptr() as *const f32,
                                    m,
                                    n,
                                    k,
                                    b.as_ptr(),
                                    n as isize,
                                    1,
                                    c.as_mut_ptr(),
                                    n as isize,
                                    1,
                                    epa,
                                )
                            });
                            set_narrow(true);
                            assert_eq!(rc, 0);
                            outs.push(c);
                        }
                    }
                    for o in &outs[1..] {
                        assert!(
                            o.iter()
                                .zip(&outs[0])
                                .all(|(x, y)| x.to_bits() == y.to_bits()
                                    || (x.is_nan() && y.is_nan())),
                            "{kern:?} n={n} bias={ub} res={ur} tr={tr} [{lo}, {hi}]"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn balanced_bounds_cut_at_whole_tiles_nearest_even_shares() {
        assert_eq!(balanced_bounds(256, 14, 2), vec![0, 126, 256]);
        assert_eq!(balanced_bounds(196, 32, 2), vec![0, 96, 196]);
        assert_eq!(balanced_bounds(64, 14, 2), vec![0, 28, 64]);
        assert_eq!(balanced_bounds(10, 14, 2), vec![0, 10]);
        assert_eq!(balanced_bounds(100, 32, 3), vec![0, 32, 64, 100]);
        for (e, u, t) in [(1000, 14, 7), (33, 32, 4), (512, 14, 16)] {
            let b = balanced_bounds(e, u, t);
            assert!(b.len() - 1 <= t && b[0] == 0 && *b.last().unwrap() == e);
            assert!(b.windows(2).all(|w| w[0] < w[1] && w[0] % u == 0));
        }
    }

    #[test]
    fn header_mismatch_is_an_error() {
        let a = vec![1f32; 6 * 5];
        let pa = pack_a(6, 5, &a, 5, 1, 1.0);
        let b = [1f32; 5 * 3];
        let mut c = vec![7f32; 6 * 3];
        let call = |pa: &AlignedBuf, m: usize, k: usize, c: &mut [f32]| unsafe {
            dnnc_sgemm_packed(
                pa.as_ptr() as *const f32,
                m,
                3,
                k,
                b.as_ptr(),
                3,
                1,
                c.as_mut_ptr(),
                3,
                1,
                0,
            )
        };
        assert_eq!(call(&pa, 6, 4, &mut c), 1);
        assert_eq!(call(&pa, 5, 5, &mut c), 1);
        let mut bad = pa.clone();
        bad.as_bytes_mut()[0] ^= 1;
        assert_eq!(call(&bad, 6, 5, &mut c), 1);
        assert!(c.iter().all(|&v| v == 7.0));
        assert_eq!(call(&pa, 6, 5, &mut c), 0);
        assert!(c.iter().all(|&v| v == 5.0));
    }
}
