//! Padded-plane window kernels: depthwise convolution and max pooling over
//! a per-plane scratch copy of the input (on the generated function's
//! stack) in which the padding is materialised and, for stride 2, the even
//! and odd columns are stored apart. The generated compute loops then have
//! no bounds checks and no border cases: every output row is a run of
//! f32x4 blocks whose taps are plain loads at constant offsets (optionally
//! several output rows sharing each loaded input vector), and the scratch's padding
//! is written once per kernel call since the per-plane copy never touches
//! it. Stride-1 depthwise convs skip the copy ([`PadPlane::new_direct`]):
//! their loops read the input plane in place, the rows touching the top or
//! bottom padding and the blocks touching the side padding emitted
//! separately with the padding as zero vectors and lane shifts.

use super::emit::{mem, Emit};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I32X4, I64};
use cranelift_codegen::ir::{
    Endianness, InstBuilder, MemFlagsData, StackSlot, StackSlotData, StackSlotKind, Value,
};
use cranelift_frontend::Variable;

/// Largest scratch plane (bytes) put on the stack; bigger planes keep the
/// older bounds-checked kernels (kernels run on pool threads with 2 MiB
/// stacks, and Cranelift emits no stack probes).
const MAX_SCRATCH: usize = 256 * 1024;

/// Scratch-plane bytes from which the padded-plane kernels copy rows as
/// they need them ([`PadPlane::streams`]), one row block ahead of the
/// compute. MobileNet-V2 at one thread (layers named by input size): its
/// 112x112 stride-2 depthwise layer 0.34 → 0.27 ms streamed (then
/// copying each block's own rows just before it); with the copy one
/// block ahead, the 56x56 (14.6 KiB scratch) and 28x28 (3.7 KiB) ones
/// 0.095 → 0.084 and 0.038 → 0.034 ms, where streaming the old way had
/// taken the 28x28 one 0.035 → 0.050 ms (its loads met the copy's
/// stores in flight and could not forward from them); the 14x14 one
/// (0.96 KiB) went 0.031 → 0.043 ms streamed and copies first.
const STREAM_MIN_BYTES: usize = 2 * 1024;

/// The geometry of a 2-D sliding window over one plane.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    /// Input height and width.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window height.
    pub kh: usize,
    /// Window width.
    pub kw: usize,
    /// Vertical stride.
    pub sh: usize,
    /// Horizontal stride.
    pub sw: usize,
    /// Vertical dilation.
    pub dh: usize,
    /// Horizontal dilation.
    pub dw: usize,
    /// Top padding.
    pub pt: usize,
    /// Left padding.
    pub pl: usize,
}

/// What each output block computes from its window.
pub(crate) enum Combine {
    /// `0 + x0*w0 + x1*w1 + ...` in (row, column) tap order, each product
    /// fused into the sum (one rounding per tap); the taps are splatted.
    /// (An average pool's sum with taps of 1: exactly the interpreter's.)
    Fma(Vec<Value>),
    /// Window row 0 as [`Combine::Fma`] sums it; each later row as a chain
    /// of its own from its first (rounded) product, added to the sum when
    /// the row is done ([`depthwise`]).
    FmaRows(Vec<Value>),
    /// The same sum with the product rounded before the add.
    MulAdd(Vec<Value>),
    /// Maximum with x86 `maxps` semantics (a NaN in a later tap is lost:
    /// callers detect NaNs in the plane and recompute such planes).
    Max,
}

/// The scratch layout for one window geometry: padded row `k` (input row
/// `k - pt`) holds `s = sw` phase rows of `l` floats each, phase `φ`
/// holding padded columns `φ, φ + s, φ + 2s, ...` (padded column
/// `iw + pl` for input column `iw`).
pub(crate) struct PadPlane {
    win: Window,
    /// Floats per phase row.
    l: usize,
    /// Floats per padded row (`s * l`).
    rs: usize,
    /// Padded rows.
    ph: usize,
    /// Input rows copied (the rest are never read).
    hc: usize,
    /// Scratch base address, once allocated.
    base: Option<Value>,
    /// Stack slot holding the base address (see [`PadPlane::compute`]).
    ptr_slot: Option<StackSlot>,
    /// The input plane is read in place, with no scratch
    /// ([`PadPlane::new_direct`]).
    direct: bool,
}

/// A plane to copy into the scratch: input buffer, element offset of the
/// plane, and the NaN mask variable to update, if any.
pub(crate) type Src = (Value, Value, Option<Variable>);

fn le() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

impl PadPlane {
    /// The layout for `win`, or `None` when the padded-plane kernels do not
    /// apply (stride above 2, fewer than four output columns, too big).
    pub fn new(win: Window) -> Option<Self> {
        let s = win.sw;
        if !(1..=2).contains(&s) || win.ow < 4 || win.sh == 0 || win.kh == 0 || win.kw == 0 {
            return None;
        }
        if win.dh == 0 || win.dw == 0 || win.h == 0 || win.w == 0 {
            return None;
        }
        let reach = (win.kw - 1) * win.dw;
        // Whole 16-byte vectors per phase row, so the rows (and the
        // copy's stores of the even phase) start on vector boundaries.
        let l = (win.ow + reach / s)
            .max((win.pl + win.w - 1) / s + 1)
            .next_multiple_of(4);
        let rs = s * l;
        let ph = (win.oh - 1) * win.sh + (win.kh - 1) * win.dh + 1;
        let hc = win.h.min(ph.saturating_sub(win.pt));
        if (ph * rs + 4) * 4 > MAX_SCRATCH {
            return None;
        }
        Some(PadPlane {
            win,
            l,
            rs,
            ph,
            hc,
            base: None,
            ptr_slot: None,
            direct: false,
        })
    }

    /// A layout reading the input plane in place (rows `w` floats apart),
    /// with no scratch and no copy: stride 1 and no dilation, at most
    /// three padding rows or columns on each side, rows of at least four
    /// floats. Taps in padding rows read a zero vector; the blocks whose
    /// taps reach into the side padding load the nearest whole vector of
    /// the row and shift zeros in, so each output sums exactly the
    /// products the padded copy gives (the zeros included). For
    /// MobileNet-V2's stride-1 depthwise layers the copy streamed every
    /// input plane through the scratch first: 1.04 → 0.92 ms of them at
    /// one thread. `None` where the layout does not apply.
    pub fn new_direct(win: Window) -> Option<Self> {
        let pr = (win.ow + win.kw - 1).checked_sub(win.pl + win.w)?;
        let pb = (win.oh + win.kh - 1).checked_sub(win.pt + win.h)?;
        let unit = win.sw == 1 && win.sh == 1 && win.dw == 1 && win.dh == 1;
        if !unit || win.w < 4 || win.ow < 4 || win.oh == 0 || win.kh == 0 || win.kw == 0 {
            return None;
        }
        if win.pl > 3 || pr > 3 || win.pt > 3 || pb > 3 {
            return None;
        }
        Some(PadPlane {
            win,
            l: win.w,
            rs: win.w,
            ph: win.h,
            hc: win.h,
            base: None,
            ptr_slot: None,
            direct: true,
        })
    }

    /// Whether the plane is read in place ([`PadPlane::new_direct`]): no
    /// scratch to initialise.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether the depthwise kernel should have [`PadPlane::compute`] copy
    /// the plane's rows as the row blocks come to need them (given `src`)
    /// rather than the whole plane first: for scratch planes of
    /// [`STREAM_MIN_BYTES`] and more, so the copy's loads, shuffles and
    /// stores issue beside the compute's multiply-adds instead of in a
    /// phase of their own, and the misses of an input from L3 overlap the
    /// arithmetic. Smaller planes pay more for the per-block copies than
    /// they save. (The max pool streams every plane:
    /// copying SqueezeNet's 55x55 planes first measured 0.066 → 0.074 ms.)
    pub fn streams(&self) -> bool {
        self.ph * self.rs * 4 >= STREAM_MIN_BYTES
    }

    /// Allocates the scratch and fills all of it with `fill` (the padding
    /// value); call once, before the plane loop.
    pub fn init(&mut self, e: &mut Emit<'_>, fill: f32) {
        let nv = (self.ph * self.rs).div_ceil(4);
        let ss = e.b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            (nv * 16) as u32,
            4,
        ));
        let base = e.b.ins().stack_addr(I64, ss, 0);
        let v = e.vf(fill);
        let s = e.ci(0);
        let en = e.ci((nv * 16) as i64);
        e.for_range(s, en, 16, |e, o| {
            let p = e.b.ins().iadd(base, o);
            e.b.ins().store(mem(), v, p, 0);
        });
        self.base = Some(base);
        let ps =
            e.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, 8, 3));
        let pa = e.b.ins().stack_addr(I64, ps, 0);
        e.b.ins().store(mem(), base, pa, 0);
        self.ptr_slot = Some(ps);
    }

    /// Copies plane `x[xo..]` (element offset) into the scratch's data
    /// region; when `nan` is given, ORs an unordered-compare mask of every
    /// copied element into it.
    pub fn copy(&self, e: &mut Emit<'_>, x: Value, xo: Value, nan: Option<Variable>) {
        let lo = e.ci(0);
        let hi = e.ci(self.hc as i64);
        self.copy_rows(e, (x, xo, nan), lo, hi);
    }

    /// Copies input rows `[lo, hi)` (run-time values within `[0, hc]`) of
    /// plane `x[xo..]` into the scratch, as [`PadPlane::copy`] does.
    fn copy_rows(&self, e: &mut Emit<'_>, src: Src, lo: Value, hi: Value) {
        let (x, xo, nan) = src;
        let win = self.win;
        let base = self.base.expect("scratch not allocated");
        let (w, pl, l, rs) = (win.w, win.pl, self.l, self.rs);
        let check = |e: &mut Emit<'_>, a: Value, b: Value| {
            if let Some(nv) = nan {
                let m = e.b.ins().fcmp(FloatCC::Unordered, a, b);
                let o = e.b.use_var(nv);
                let o = e.b.ins().bor(o, m);
                e.b.def_var(nv, o);
            }
        };
        e.for_range(lo, hi, 1, |e, ih| {
            let t = e.b.ins().imul_imm_s(ih, w as i64);
            let t = e.b.ins().iadd(t, xo);
            let src = e.addr(x, t, 4);
            let t = e.b.ins().imul_imm_s(ih, (rs * 4) as i64);
            let t = e.b.ins().iadd_imm_s(t, (win.pt * rs * 4) as i64);
            let dst = e.b.ins().iadd(base, t);
            if win.sw == 1 {
                let dst = e.b.ins().iadd_imm_s(dst, (pl * 4) as i64);
                let nv = w / 4;
                counted(e, nv, 16, |e, o, d| {
                    let sp = e.b.ins().iadd(src, o);
                    let v = e.b.ins().load(F32X4, mem(), sp, d);
                    check(e, v, v);
                    let dp = e.b.ins().iadd(dst, o);
                    e.b.ins().store(mem(), v, dp, d);
                });
                if w % 4 != 0 {
                    if w >= 4 {
                        let o = ((w - 4) * 4) as i32;
                        let v = e.b.ins().load(F32X4, mem(), src, o);
                        check(e, v, v);
                        e.b.ins().store(mem(), v, dst, o);
                    } else {
                        for k in 0..w {
                            let o = (k * 4) as i32;
                            let v = e.b.ins().load(F32, mem(), src, o);
                            let vv = e.splat(v);
                            check(e, vv, vv);
                            e.b.ins().store(mem(), v, dst, o);
                        }
                    }
                }
            } else {
                // Stride 2: even input columns of each 8 to one phase row,
                // odd ones to the other.
                let (ph_e, ph_o) = (pl % 2, (pl + 1) % 2);
                let de = e.b.ins().iadd_imm_s(dst, ((ph_e * l + pl / 2) * 4) as i64);
                let dod =
                    e.b.ins()
                        .iadd_imm_s(dst, ((ph_o * l + pl.div_ceil(2)) * 4) as i64);
                let n8 = w / 8;
                counted(e, n8, 16, |e, o, d| {
                    let so = e.b.ins().iadd(o, o);
                    let sp = e.b.ins().iadd(src, so);
                    let a = e.b.ins().load(F32X4, mem(), sp, 2 * d);
                    let b = e.b.ins().load(F32X4, mem(), sp, 2 * d + 16);
                    check(e, a, b);
                    let ev = e.shuffle4(a, b, [0, 2, 4, 6]);
                    let od = e.shuffle4(a, b, [1, 3, 5, 7]);
                    let p = e.b.ins().iadd(de, o);
                    e.b.ins().store(mem(), ev, p, d);
                    let p = e.b.ins().iadd(dod, o);
                    e.b.ins().store(mem(), od, p, d);
                });
                // The tail: one more block of 8 ending at the last column
                // (rewriting some columns with the same values), its even
                // and odd columns going to the phases their parity gives.
                let tail0 = if w % 8 != 0 && w >= 8 { w } else { n8 * 8 };
                if tail0 == w && w % 8 != 0 {
                    let iw0 = w - 8;
                    let a = e.b.ins().load(F32X4, mem(), src, (iw0 * 4) as i32);
                    let b = e.b.ins().load(F32X4, mem(), src, (iw0 * 4 + 16) as i32);
                    check(e, a, b);
                    let ev = e.shuffle4(a, b, [0, 2, 4, 6]);
                    let od = e.shuffle4(a, b, [1, 3, 5, 7]);
                    for (v, k) in [(ev, iw0 + pl), (od, iw0 + 1 + pl)] {
                        let o = (((k % 2) * l + k / 2) * 4) as i32;
                        e.b.ins().store(mem(), v, dst, o);
                    }
                }
                for iw in tail0..w {
                    let v = e.b.ins().load(F32, mem(), src, (iw * 4) as i32);
                    let vv = e.splat(v);
                    check(e, vv, vv);
                    let k = iw + pl;
                    let o = (((k % 2) * l + k / 2) * 4) as i32;
                    e.b.ins().store(mem(), v, dst, o);
                }
            }
        });
    }

    /// The input rows (of `[0, hc)`) that output rows up to `r_end` read
    /// end before: `[.., rows_to(r_end))`.
    fn rows_to(&self, e: &mut Emit<'_>, r_end: Value) -> Value {
        let win = self.win;
        let (sh, pt) = (win.sh as i64, win.pt as i64);
        let reach = ((win.kh - 1) * win.dh) as i64;
        let t = e.b.ins().imul_imm_s(r_end, sh);
        let t = e.b.ins().iadd_imm_s(t, reach - sh + 1 - pt);
        let z = e.ci(0);
        let t = e.b.ins().smax(t, z);
        let c = e.ci(self.hc as i64);
        e.b.ins().smin(t, c)
    }

    /// The first input row (of `[0, hc]`) output row `r` reads.
    fn row_start(&self, e: &mut Emit<'_>, r: Value) -> Value {
        let t = e.b.ins().imul_imm_s(r, self.win.sh as i64);
        let t = e.b.ins().iadd_imm_s(t, -(self.win.pt as i64));
        let z = e.ci(0);
        let t = e.b.ins().smax(t, z);
        let c = e.ci(self.hc as i64);
        e.b.ins().smin(t, c)
    }

    /// Copies the input rows output rows `[r0, r1)` read (run-time values)
    /// of plane `x[xo..]` into the scratch, as [`PadPlane::copy`] does for
    /// the whole plane.
    pub fn copy_band(&self, e: &mut Emit<'_>, x: Value, xo: Value, (r0, r1): (Value, Value)) {
        let lo = self.row_start(e, r0);
        let hi = self.rows_to(e, r1);
        self.copy_rows(e, (x, xo, None), lo, hi);
    }

    /// Computes every output of the plane into `y[yo..]` (element offset),
    /// `rb` output rows and `u` f32x4 blocks per step. With `src` (the
    /// plane `x[xo..]` and an optional NaN mask, as for
    /// [`PadPlane::copy`]) the input rows are copied in as the row blocks
    /// first need them; without, the plane must already be copied (for
    /// `band`, the rows [`PadPlane::copy_band`] copies). `band`: only
    /// output rows `[r0, r1)` (run-time values), whole blocks of `rb`
    /// rows from `r0` and the rest one row per step (`rb` must be 1 for
    /// a [`PadPlane::new_direct`] layout).
    #[allow(clippy::too_many_arguments)]
    pub fn compute(
        &self,
        e: &mut Emit<'_>,
        (y, yo): (Value, Value),
        op: &Combine,
        (rb, u): (usize, usize),
        out: &Store<'_, '_>,
        src: Option<Src>,
        band: Option<(Value, Value)>,
    ) -> Result<(), String> {
        let win = self.win;
        if self.direct {
            if band.is_some() && rb != 1 {
                return Err("a band of output rows is computed one row per step".into());
            }
            return self.compute_direct(e, (y, yo), op, (rb, u), out, src, band);
        }
        let rb = rb.clamp(1, win.oh);
        let mut err: Option<String> = None;
        let full = win.oh / rb * rb;
        let ps = self.ptr_slot.expect("scratch not allocated");
        // With `src`, the plane's rows are copied one row block ahead of
        // the compute: the block at `r` copies the rows the next block
        // (`rb` rows on) reads beyond its own, the first block also its
        // own. So the copy's cache misses overlap the arithmetic instead
        // of all coming first, and no compute load reads a line the copy
        // has just stored to (such loads cannot take their data from the
        // store queue: they straddle two of the copy's vectors).
        let fetch = |e: &mut Emit<'_>, r: Value, n: usize| {
            if let Some(src) = src {
                // Rows before block `r + rb` are copied (none before the
                // first row, or before a band's first row its window's
                // first).
                let ahead = e.b.ins().iadd_imm_s(r, rb as i64);
                let lo = self.rows_to(e, ahead);
                let (first, start) = match band {
                    Some((r0, _)) => {
                        let first = e.b.ins().icmp(IntCC::Equal, r, r0);
                        (first, self.row_start(e, r))
                    }
                    None => (e.b.ins().icmp_imm_s(IntCC::Equal, r, 0), e.ci(0)),
                };
                let lo = e.b.ins().select(first, start, lo);
                let r_end = e.b.ins().iadd_imm_s(r, (n + rb) as i64);
                let hi = self.rows_to(e, r_end);
                self.copy_rows(e, src, lo, hi);
            }
        };
        let mut block_at = |e: &mut Emit<'_>, r: Value, n: usize| {
            fetch(e, r, n);
            // The scratch is read with movable (`readonly`) loads; their
            // addresses derive from this ordinary load of the base, which
            // stays after the rows' copy above, so no scratch load can be
            // hoisted above the stores that fill it.
            let pa = e.b.ins().stack_addr(I64, ps, 0);
            let base = e.b.ins().load(I64, mem(), pa, 0);
            if let Err(m) = self.row_block(e, base, y, yo, r, n, op, u, out) {
                err.get_or_insert(m);
            }
        };
        if let Some((r0, r1)) = band {
            // Whole blocks of `rb` rows from the band's first, then its
            // last rows one by one.
            let mut tail = r0;
            if rb > 1 {
                let len = e.b.ins().isub(r1, r0);
                let whole = e.b.ins().udiv_imm_u(len, rb as i64);
                let whole = e.b.ins().imul_imm_s(whole, rb as i64);
                tail = e.b.ins().iadd(r0, whole);
                e.for_range(r0, tail, rb as i64, |e, r| block_at(e, r, rb));
            }
            e.for_range(tail, r1, 1, |e, r| block_at(e, r, 1));
            return err.map_or(Ok(()), Err);
        }
        if full > 0 {
            let s = e.ci(0);
            let en = e.ci(full as i64);
            e.for_range(s, en, rb as i64, |e, r| block_at(e, r, rb));
        }
        if full < win.oh {
            let r = e.ci(full as i64);
            block_at(e, r, win.oh - full);
        }
        err.map_or(Ok(()), Err)
    }

    /// [`PadPlane::compute`] for a [`PadPlane::new_direct`] layout: `src`
    /// names the plane read in place. The output rows whose windows reach
    /// the top or bottom padding are emitted one by one (which of their
    /// taps are padding is then static), the rest as a loop; within
    /// `band`, each of those rows only when the band holds it.
    #[allow(clippy::too_many_arguments)]
    fn compute_direct(
        &self,
        e: &mut Emit<'_>,
        (y, yo): (Value, Value),
        op: &Combine,
        (rb, u): (usize, usize),
        out: &Store<'_, '_>,
        src: Option<Src>,
        band: Option<(Value, Value)>,
    ) -> Result<(), String> {
        let win = self.win;
        let (x, xo, _) = src.ok_or("an in-place plane needs its input")?;
        let base = e.addr(x, xo, 4);
        // Rows [top, bot) have every window row inside the input.
        let top = win.pt.min(win.oh);
        let bot = (win.h + win.pt + 1)
            .saturating_sub(win.kh)
            .clamp(top, win.oh);
        let mut err: Option<String> = None;
        let mut row = |e: &mut Emit<'_>, r: Value, n: usize, valid: Option<&[bool]>| {
            if let Err(m) = self.row_block_direct(e, base, (y, yo), r, n, op, u, out, valid) {
                err.get_or_insert(m);
            }
        };
        // Which window rows of output row `r` lie inside the input.
        let valid = |r: usize| -> Vec<bool> {
            (0..win.kh)
                .map(|i| (r + i).checked_sub(win.pt).is_some_and(|ih| ih < win.h))
                .collect()
        };
        // An edge row, emitted for its static padding (under a band, only
        // when the band holds it).
        fn edge<'e>(
            e: &mut Emit<'e>,
            r: usize,
            valid: &[bool],
            band: Option<(Value, Value)>,
            row: &mut impl FnMut(&mut Emit<'e>, Value, usize, Option<&[bool]>),
        ) {
            let rv = e.ci(r as i64);
            match band {
                Some((r0, r1)) => {
                    let a = e.b.ins().icmp(IntCC::SignedLessThanOrEqual, r0, rv);
                    let b = e.b.ins().icmp(IntCC::SignedLessThan, rv, r1);
                    let c = e.b.ins().band(a, b);
                    e.when(c, |e| row(e, rv, 1, Some(valid)));
                }
                None => row(e, rv, 1, Some(valid)),
            }
        }
        for r in 0..top {
            edge(e, r, &valid(r), band, &mut row);
        }
        if let Some((r0, r1)) = band {
            let t = e.ci(top as i64);
            let s = e.b.ins().smax(r0, t);
            let b = e.ci(bot as i64);
            let en = e.b.ins().smin(r1, b);
            e.for_range(s, en, 1, |e, r| row(e, r, 1, None));
            for r in bot..win.oh {
                edge(e, r, &valid(r), band, &mut row);
            }
            return err.map_or(Ok(()), Err);
        }
        let rb = rb.clamp(1, (bot - top).max(1));
        let full = top + (bot - top) / rb * rb;
        if full > top {
            let s = e.ci(top as i64);
            let en = e.ci(full as i64);
            e.for_range(s, en, rb as i64, |e, r| row(e, r, rb, None));
        }
        if full < bot {
            let r = e.ci(full as i64);
            row(e, r, bot - full, None);
        }
        for r in bot..win.oh {
            let rv = e.ci(r as i64);
            row(e, rv, 1, Some(&valid(r)));
        }
        err.map_or(Ok(()), Err)
    }

    /// Output rows `[r, r + rb)` of an in-place plane: the blocks whose
    /// taps reach the side padding one by one at their static columns,
    /// the rest `u` blocks per step. `valid`: which window rows lie inside
    /// the input (`None`: all).
    #[allow(clippy::too_many_arguments)]
    fn row_block_direct(
        &self,
        e: &mut Emit<'_>,
        base: Value,
        (y, yo): (Value, Value),
        r: Value,
        rb: usize,
        op: &Combine,
        u: usize,
        out: &Store<'_, '_>,
        valid: Option<&[bool]>,
    ) -> Result<(), String> {
        let win = self.win;
        // Window row 0 of output row r is input row r - pt.
        let t = e.b.ins().imul_imm_s(r, (win.w * 4) as i64);
        let t = e.b.ins().iadd_imm_s(t, -((win.pt * win.w * 4) as i64));
        let pb = e.b.ins().iadd(base, t);
        let t = e.b.ins().imul_imm_s(r, win.ow as i64);
        let t = e.b.ins().iadd(t, yo);
        let py = e.addr(y, t, 4);
        let rows = out.rows(e, r, rb);
        let rows = rows.as_deref();
        let mut err: Option<String> = None;
        // Block starts (output columns): whole blocks, then one ending at
        // the last column. A block is an edge block when a tap column
        // leaves the row.
        let mut starts: Vec<usize> = (0..win.ow / 4).map(|k| 4 * k).collect();
        if !win.ow.is_multiple_of(4) {
            starts.push(win.ow - 4);
        }
        let edge = |j: usize| j < win.pl || j + 4 + win.kw - 1 > win.pl + win.w;
        let inner: Vec<usize> = starts.iter().copied().filter(|&j| !edge(j)).collect();
        // Inner blocks are whole blocks in a run: j0, j0 + 4, ...
        let (j0, n_in) = match inner.first() {
            Some(&j0) if inner.iter().enumerate().all(|(k, &j)| j == j0 + 4 * k) => {
                (j0, inner.len())
            }
            _ => (0, 0),
        };
        // Edge blocks before and after the run (every block when the
        // inner ones are no single run); at static columns, any block is
        // computed right.
        let (left, right): (Vec<usize>, Vec<usize>) = if n_in == 0 {
            (starts.clone(), Vec::new())
        } else {
            starts.iter().filter(|&&j| edge(j)).partition(|&&j| j < j0)
        };
        let z = e.ci(0);
        let ctx = (out, rows);
        let mut emit = |e: &mut Emit<'_>, qb: Value, offs: &[usize], at: bool| {
            let direct = Some((valid, at));
            if let Err(m) = self.block(e, pb, py, qb, rb, offs, op, ctx, direct) {
                err.get_or_insert(m);
            }
        };
        for &j in &left {
            emit(e, z, &[j * 4], true);
        }
        blocks_run(e, (j0, n_in), u, &[], |e, qb, offs| {
            emit(e, qb, offs, false)
        });
        for &j in &right {
            emit(e, z, &[j * 4], true);
        }
        err.map_or(Ok(()), Err)
    }

    /// Window row `pr`, tap column `c` of the block at byte offset `o` of
    /// an in-place plane's row (`px` at the block's window row 0, column
    /// 0): a zero vector in a padding row; with `at` (static column), a
    /// load of the nearest whole vector inside the row with zeros shifted
    /// in for the columns outside it; else a plain load.
    fn direct_tap(
        &self,
        e: &mut Emit<'_>,
        px: Value,
        pr: usize,
        c: usize,
        o: usize,
        (valid, at): (Option<&[bool]>, bool),
    ) -> Value {
        let win = self.win;
        if valid.is_some_and(|v| !v[pr]) {
            return e.vf(0.0);
        }
        let row = (pr * self.rs * 4) as i64;
        let start = (o / 4) as i64 + c as i64 - win.pl as i64;
        let w = win.w as i64;
        if at && (start < 0 || start + 4 > w) {
            // Lane i holds column start + i; the vector loaded begins at
            // column `from` (0 or w - 4).
            let from = if start < 0 { 0 } else { w - 4 };
            let ov = (row + 4 * from) as i32;
            let v = e.b.ins().load(F32X4, movable(), px, ov);
            let z = e.vf(0.0);
            let idx = [0i64, 1, 2, 3].map(|i| {
                let col = start + i;
                if (0..w).contains(&col) {
                    (col - from) as u8
                } else {
                    4
                }
            });
            return e.shuffle4(v, z, idx);
        }
        let disp = (row + 4 * (c as i64 - win.pl as i64) + o as i64) as i32;
        e.b.ins().load(F32X4, movable(), px, disp)
    }

    /// Output rows `[r, r + rb)`: all columns.
    #[allow(clippy::too_many_arguments)]
    fn row_block(
        &self,
        e: &mut Emit<'_>,
        base: Value,
        y: Value,
        yo: Value,
        r: Value,
        rb: usize,
        op: &Combine,
        u: usize,
        out: &Store<'_, '_>,
    ) -> Result<(), String> {
        let win = self.win;
        let t = e.b.ins().imul_imm_s(r, (win.sh * self.rs * 4) as i64);
        let pb = e.b.ins().iadd(base, t);
        let t = e.b.ins().imul_imm_s(r, win.ow as i64);
        let t = e.b.ins().iadd(t, yo);
        let py = e.addr(y, t, 4);
        let mut err: Option<String> = None;
        let rows = out.rows(e, r, rb);
        let rows = rows.as_deref();
        // Whole blocks, then one block overlapping the last columns
        // (recomputing a few outputs to the same values).
        let last: &[usize] = if win.ow.is_multiple_of(4) {
            &[]
        } else {
            &[(win.ow - 4) * 4]
        };
        blocks_run(e, (0, win.ow / 4), u, last, |e, qb, offs| {
            if let Err(m) = self.block(e, pb, py, qb, rb, offs, op, (out, rows), None) {
                err.get_or_insert(m);
            }
        });
        err.map_or(Ok(()), Err)
    }

    /// One step: output rows `rb` x blocks at byte offsets `qb + offs[k]`
    /// (an output block at column offset `o` reads phase-row offset `o` too,
    /// as phase rows are indexed by output column). `direct`: an in-place
    /// plane ([`PadPlane::new_direct`]), with which window rows are inside
    /// the input (`None`: all) and whether `offs` are absolute columns
    /// (`qb` zero), so taps reaching the side padding are shifted in.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        e: &mut Emit<'_>,
        pb: Value,
        py: Value,
        qb: Value,
        rb: usize,
        offs: &[usize],
        op: &Combine,
        (out, eprows): (&Store<'_, '_>, Option<&[EpRow]>),
        direct: Option<(Option<&[bool]>, bool)>,
    ) -> Result<(), String> {
        let win = self.win;
        let s = win.sw;
        let px = e.b.ins().iadd(pb, qb);
        let pyq = e.b.ins().iadd(py, qb);
        let nu = offs.len();
        let mut acc: Vec<Option<Value>> = vec![None; rb * nu];
        // A fused epilogue's per-plane bias starts the sums (the first tap
        // is then added to it rather than to zero), saving one vector add
        // per block: the depthwise kernel is bound by its floating-point
        // ports (9 FMAs, bias, clamp per four outputs).
        let mut bias_in_acc = vec![false; rb];
        if !matches!(op, Combine::Max) {
            let z = e.vf(0.0);
            for rho in 0..rb {
                let init = match (out, eprows) {
                    (Store::Fused(epi, _), Some(rows)) => epi.extra_splat(&rows[rho]),
                    _ => None,
                };
                bias_in_acc[rho] = init.is_some();
                for k in 0..nu {
                    acc[rho * nu + k] = Some(init.unwrap_or(z));
                }
            }
        }
        // Padded rows in order; each loaded vector feeds every output row
        // whose window holds it. [`Combine::FmaRows`] runs one chain per
        // window row: `row_sum` holds the current row's partial sum.
        let mut row_sum: Vec<Option<Value>> = vec![None; rb * nu];
        let rows_apart = matches!(op, Combine::FmaRows(_));
        let rows = (rb - 1) * win.sh + (win.kh - 1) * win.dh + 1;
        for pr in 0..rows {
            let users: Vec<(usize, usize)> = (0..rb)
                .filter_map(|rho| {
                    let d = pr as isize - (rho * win.sh) as isize;
                    if d >= 0
                        && (d as usize).is_multiple_of(win.dh)
                        && (d as usize / win.dh) < win.kh
                    {
                        Some((rho, d as usize / win.dh))
                    } else {
                        None
                    }
                })
                .collect();
            if users.is_empty() {
                continue;
            }
            let (wv, fused) = match op {
                Combine::Fma(wv) => (wv, true),
                Combine::FmaRows(wv) => (wv, true),
                Combine::MulAdd(wv) => (wv, false),
                Combine::Max => {
                    // Separable: the row's maximum over the window's columns
                    // once per block, then folded into every output row whose
                    // window holds this row (rows shared by `rb` output rows
                    // are reduced once, not `rb` times).
                    for (k, &o) in offs.iter().enumerate() {
                        let mut h: Option<Value> = None;
                        for j in 0..win.kw {
                            let c = j * win.dw;
                            let col = (c % s) * self.l + c / s;
                            let disp = ((pr * self.rs + col) * 4 + o) as i32;
                            let v = e.b.ins().load(F32X4, movable(), px, disp);
                            h = Some(match h {
                                None => v,
                                Some(a) => max_ps(e, a, v),
                            });
                        }
                        let h = h.expect("window has columns");
                        for &(rho, _) in &users {
                            let a = &mut acc[rho * nu + k];
                            *a = Some(match *a {
                                None => h,
                                Some(a) => max_ps(e, a, h),
                            });
                        }
                    }
                    continue;
                }
            };
            for j in 0..win.kw {
                let c = j * win.dw;
                let col = (c % s) * self.l + c / s;
                for (k, &o) in offs.iter().enumerate() {
                    let v = match direct {
                        None => {
                            let disp = ((pr * self.rs + col) * 4 + o) as i32;
                            e.b.ins().load(F32X4, movable(), px, disp)
                        }
                        Some((valid, at)) => self.direct_tap(e, px, pr, c, o, (valid, at)),
                    };
                    for &(rho, i) in &users {
                        let slot = rho * nu + k;
                        let w = wv[i * win.kw + j];
                        if !fused {
                            let sum = acc[slot].expect("sums start at zero");
                            let p = e.b.ins().fmul(w, v);
                            acc[slot] = Some(e.b.ins().fadd(sum, p));
                            continue;
                        }
                        // One chain, or (row chains) window row 0, which
                        // continues the sum.
                        if !rows_apart || i == 0 {
                            let sum = acc[slot].expect("sums start at zero");
                            acc[slot] = Some(e.b.ins().fma(v, w, sum));
                            continue;
                        }
                        // A later window row: a chain of its own from its
                        // first product, added to the sum when it is done.
                        let part = match row_sum[slot] {
                            None => e.b.ins().fmul(v, w),
                            Some(part) => e.b.ins().fma(v, w, part),
                        };
                        if j + 1 == win.kw {
                            let sum = acc[slot].expect("sums start at zero");
                            acc[slot] = Some(e.b.ins().fadd(sum, part));
                            row_sum[slot] = None;
                        } else {
                            row_sum[slot] = Some(part);
                        }
                    }
                }
            }
        }
        for rho in 0..rb {
            for (k, &o) in offs.iter().enumerate() {
                let v = acc[rho * nu + k].expect("window has taps");
                match out {
                    Store::Plain => {
                        let disp = ((rho * win.ow) * 4 + o) as i32;
                        e.b.ins().store(mem(), v, pyq, disp);
                    }
                    Store::Fused(epi, _) => {
                        let rows = eprows.expect("fused rows prepared");
                        epi.apply(e, &rows[rho], v, qb, o as i32, bias_in_acc[rho])?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The `n` whole f32x4 blocks of a row from output column `j0`, `u` per
/// step through [`counted`] (`step(e, qb, offs)`: byte offsets `qb +
/// offs[k]`), then the leftover blocks together with `extra` (byte offsets
/// of further blocks) as one step at `qb` = 0.
fn blocks_run(
    e: &mut Emit<'_>,
    (j0, n): (usize, usize),
    u: usize,
    extra: &[usize],
    mut step: impl FnMut(&mut Emit<'_>, Value, &[usize]),
) {
    let u = u.clamp(1, n.max(1));
    let main = n / u * u;
    if main > 0 {
        let offs: Vec<usize> = (0..u).map(|k| (j0 + 4 * k) * 4).collect();
        counted(e, main / u, (u * 16) as i32, |e, qb, d| {
            let offs: Vec<usize> = offs.iter().map(|&o| o + d as usize).collect();
            step(e, qb, &offs);
        });
    }
    let mut rest: Vec<usize> = (main..n).map(|k| (j0 + 4 * k) * 4).collect();
    rest.extend_from_slice(extra);
    if !rest.is_empty() {
        let z = e.ci(0);
        step(e, z, &rest);
    }
}

/// Most iterations [`counted`] unrolls completely.
pub(crate) const UNROLL: usize = 32;

/// `n` iterations of `body(e, o, d)` at byte offset `o + d`, `step` bytes
/// apart: straight-line code with constant `d` (and `o` = 0) up to
/// [`UNROLL`] iterations, so addresses are folded into displacements and
/// the loop-invariant values are computed once (Cranelift does not hoist
/// them out of these loops); a counted loop over `o` with `d` = 0 beyond.
pub(crate) fn counted(
    e: &mut Emit<'_>,
    n: usize,
    step: i32,
    mut body: impl FnMut(&mut Emit<'_>, Value, i32),
) {
    if n == 0 {
        return;
    }
    if n <= UNROLL {
        let z = e.ci(0);
        for k in 0..n {
            body(e, z, k as i32 * step);
        }
    } else {
        let s = e.ci(0);
        let en = e.ci(n as i64 * step as i64);
        e.for_range(s, en, step as i64, |e, o| body(e, o, 0));
    }
}

/// `a < v ? v : a` lane-wise: x86 `maxps` (a NaN in `a` is lost, see
/// [`Combine::Max`]).
fn max_ps(e: &mut Emit<'_>, a: Value, v: Value) -> Value {
    let m = e.b.ins().fcmp(FloatCC::LessThan, a, v);
    let m = e.b.ins().bitcast(F32X4, le(), m);
    e.b.ins().bitselect(m, v, a)
}

/// Flags for scratch loads in the compute loops (see [`PadPlane::compute`]).
fn movable() -> MemFlagsData {
    mem().with_readonly().with_can_move()
}

/// A fresh all-false f32x4 compare mask variable.
pub(crate) fn nan_mask(e: &mut Emit<'_>) -> Variable {
    let z = e.vi(0);
    e.var(I32X4, z)
}

/// Whether depthwise sums fuse each product into the running sum (one
/// rounding per tap, via FMA) rather than rounding the product first. On:
/// compiled in order ([`Emit::in_order`]) with the filter taps in
/// registers, a 3x3 output block is 9 loads and 9 multiplies (7 FMAs and
/// the 2 plain multiplies that start window rows 1 and 2, see [`depthwise`])
/// plus 2 adds, where mul + add throughout would issue 7 more instructions
/// (measured: the 56x56x144 MobileNet-V2 layer went from 331 to 238 us
/// together with the in-register epilogue).
const DEPTHWISE_FMA: bool = true;

/// Depthwise convolution (`C == M`, one channel per group) over padded
/// scratch planes: per (image, channel) copy the input plane, splat the
/// channel's taps, compute every output, then run the channel's epilogue
/// while the plane is in cache. Each output is `s_0 + s_1 + ...` in window
/// row order, where `s_0 = 0 + x0*w0 + x1*w1 + ...` over window row 0's
/// taps (fused multiply-adds) and each later row's `s_i` starts from its
/// first product; padding taps contribute `+-0` (an infinite or NaN tap
/// meets padding as `inf * 0 = NaN`, as zero padding defines it). The
/// order is fixed per output, so every split and thread count gives the
/// same bits.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise(
    e: &mut Emit<'_>,
    geo: &dnnc_passes::ConvGeom,
    mut plane: PadPlane,
    x: Value,
    w: Value,
    y: Value,
    spec: Option<&super::elementwise::EwSpec<'_>>,
) -> Result<(), String> {
    let taps = geo.kh * geo.kw;
    let (hw, p) = ((geo.h * geo.w) as i64, (geo.oh * geo.ow) as i64);
    if !plane.direct {
        plane.init(e, 0.0);
    }
    e.in_order = true;
    let fused = spec.and_then(|s| Epilogue::new(s, geo.ow.is_multiple_of(4)));
    // One output row, one block per step when the taps fit in registers
    // (3x3): the nine taps, the sum, a window row's partial sum, the
    // loaded vector and the epilogue's constants fill 14 of the 16 xmm
    // registers. Each window row's products are a chain of their own,
    // added to the sum when the row is done: one chain of nine FMAs per
    // block kept ~9 cycles of latency-bound work in flight for each four
    // outputs on Zen 1, whose FP scheduler holds only a few such chains
    // (AMD EPYC, 1 thread, medians of 6: 16 channels of 56x56 0.046 ->
    // 0.041 ms, 144 channels 0.42 -> 0.38; MobileNet-V2's kernels 20.87 ->
    // 20.39 ms, 8 alternating runs; a standalone AVX2 loop of the same
    // shape measured 9.3 -> 7.1 cycles per block). With the row chains, two
    // blocks per step spill taps. Two rows per step (sharing each load)
    // spilled a tap and measured no faster on MobileNet-V2. Larger windows'
    // taps do not fit in registers and are broadcast from memory at each
    // use; two blocks per step then share each broadcast between two FMAs
    // (5x5 windows, 1 thread: EfficientNet block's stride-2 conv on
    // 8x96x16x16 0.104 -> 0.083 ms, 96 channels of 56x56 stride 1 0.505 ->
    // 0.43, of 112x112 stride 2 0.60 -> 0.50).
    let (rb, u) = (1, if geo.kh * geo.kw <= 9 { 1 } else { 2 });
    // Row chains for 3x3 windows and for any window at stride 1; a larger
    // window at stride 2 keeps the one chain (5x5 on 96 channels, 1T:
    // stride 1 at 56x56 1.13 -> 0.88 ms with row chains, stride 2 from
    // 112x112 1.47 -> 1.56; 3x3 stride 2 0.571 -> 0.526 and, 144
    // channels from 56x56, 0.166 -> 0.159; medians of 8 alternating).
    let rows_apart = geo.kh * geo.kw <= 9 || (geo.p.strides[0] == 1 && geo.p.strides[1] == 1);
    let mut err = None;
    // Task units (the kernel ABI's split): the N*M output planes, each
    // with its own epilogue, or bands of output rows across all planes
    // ([`band_rows`]); the padded plane is scratch on this call's
    // stack frame, so every task has its own.
    let band = match band_rows(geo) {
        Some(u) if fused.is_some() || spec.is_none() => {
            let (lo, hi) = e.task_range(geo.oh / u, "bands of output rows")?;
            let lo = e.b.ins().imul_imm_s(lo, u as i64);
            let hi = e.b.ins().imul_imm_s(hi, u as i64);
            Some((lo, hi))
        }
        _ => None,
    };
    let (lo, hi) = match band {
        Some(_) => (e.ci(0), e.ci((geo.n * geo.m) as i64)),
        None => e.task_range(geo.n * geo.m, "output planes (images x channels)")?,
    };
    // (image, channel) of plane `pn`, divided out once per task and then
    // stepped: compiled in order, a division by a constant stays a `div`
    // instruction (two per plane; stepping measured within noise of it,
    // 0-4% on MobileNet-V2's 7x7 layers, and costs no more).
    let n0 = e.b.ins().udiv_imm_u(lo, geo.m as i64);
    let co0 = e.b.ins().urem_imm_u(lo, geo.m as i64);
    let nv = e.var(I64, n0);
    let cov = e.var(I64, co0);
    e.hoist_constants();
    e.for_range(lo, hi, 1, |e, pn| {
        {
            let n = e.b.use_var(nv);
            let co = e.b.use_var(cov);
            let next = e.b.ins().iadd_imm_s(co, 1);
            let wrap = e.b.ins().icmp_imm_s(IntCC::Equal, next, geo.m as i64);
            let z = e.ci(0);
            let co_next = e.b.ins().select(wrap, z, next);
            let n_next = e.b.ins().iadd_imm_s(n, 1);
            let n_next = e.b.ins().select(wrap, n_next, n);
            e.b.def_var(cov, co_next);
            e.b.def_var(nv, n_next);
            let xo = e.b.ins().imul_imm_s(pn, hw);
            let yo = e.b.ins().imul_imm_s(pn, p);
            // An in-place plane is read by the compute itself.
            let src = if plane.direct || plane.streams() {
                Some((x, xo, None))
            } else {
                match band {
                    Some(b) => plane.copy_band(e, x, xo, b),
                    None => plane.copy(e, x, xo, None),
                }
                None
            };
            let wo = e.b.ins().imul_imm_s(co, taps as i64);
            let pw = e.addr(w, wo, 4);
            let wv: Vec<Value> = (0..taps)
                .map(|t| {
                    // Movable: the filter is read-only, and Cranelift then
                    // broadcasts from memory at the use instead of spilling.
                    let s = e.b.ins().load(F32, movable(), pw, (t * 4) as i32);
                    e.splat(s)
                })
                .collect();
            let op = match (DEPTHWISE_FMA, rows_apart) {
                (true, true) => Combine::FmaRows(wv),
                (true, false) => Combine::Fma(wv),
                (false, _) => Combine::MulAdd(wv),
            };
            let r = match &fused {
                Some(f) => {
                    let p = f.plane(e, n, co);
                    plane.compute(e, (y, yo), &op, (rb, u), &Store::Fused(f, &p), src, band)
                }
                None => plane
                    .compute(e, (y, yo), &op, (rb, u), &Store::Plain, src, band)
                    .and_then(|_| super::contraction::tile_epilogue(e, spec, n, co, 1)),
            };
            if let Err(m) = r {
                err.get_or_insert(m);
            }
        }
    });
    e.end_hoist();
    err.map_or(Ok(()), Err)
}

/// The rows per split unit when a depthwise conv splits across tasks by
/// bands of output rows (every channel) rather than by channel planes:
/// when the pointwise conv that usually produces its input, a GEMM over
/// the same pixels, splits by columns (pixels) rather than by row panels
/// (channels); see `dnnc_runtime::cpu::pgemm`'s split rule, 14-row panels
/// against 32-column tiles. With the spin pool's home tasks, each task
/// then reads the rows its own core wrote (a cache line from the other
/// core's L2 streams at ~24 GB/s here, from its own at ~85), and so does
/// the next pointwise conv, split by columns too. A unit is the fewest
/// rows that end on a cache line, and planes must start on one: two tasks
/// writing one line at the same time pass it back and forth (unaligned
/// bands measured MobileNet-V2's 28x28 depthwise convs 0.047 → 0.065 ms at
/// 2 threads). Batches keep planes (their GEMMs split by image).
///
/// MobileNet-V2 at 2 threads, per-kernel medians of 5 alternating runs:
/// its 56x56 projections 0.098 → 0.081 and 0.068 → 0.057 ms, the 32 → 16
/// conv on 112x112 0.120 → 0.117; its 56x56 depthwise conv itself 0.124 →
/// 0.139 (its halo rows come from the other core); whole runs 3.43 → 3.36
/// ms (medians of 7).
fn band_rows(geo: &dnnc_passes::ConvGeom) -> Option<usize> {
    if geo.n != 1 || geo.oh < 8 || (geo.h * geo.w).div_ceil(32) <= geo.m.div_ceil(14) {
        return None;
    }
    // Bands of whole cache lines: two tasks writing the same line of a
    // plane at the same time pass it back and forth.
    let u = (1..=8).find(|u| (u * geo.ow).is_multiple_of(16))?;
    ((geo.oh * geo.ow).is_multiple_of(16) && geo.oh.is_multiple_of(2 * u)).then_some(u)
}

/// Whether `op` evaluates a polynomial approximation (tens of
/// instructions and constants per vector). Such an epilogue is not run in
/// registers next to a window kernel's taps and sums, which it would
/// spill: the kernel stores the plane and runs the epilogue over it while
/// it is in cache (an EfficientNet block's 5x5 stride-2 depthwise conv +
/// SiLU on 8x96x16x16: 0.241 ms in registers, 0.10 as a pass).
fn transcendental(op: &dnnc_ir::Op) -> bool {
    use dnnc_ir::op::Unary as U;
    matches!(
        op,
        dnnc_ir::Op::Unary(
            U::Sigmoid
                | U::Tanh
                | U::Elu { .. }
                | U::Softplus
                | U::Gelu { .. }
                | U::Exp
                | U::Log
                | U::Erf
                | U::Selu { .. }
                | U::Sin
                | U::Cos
        )
    )
}

/// Where an output block goes: straight to the accumulator plane, or
/// through the fused epilogue of image `n`, channel `co`.
pub(crate) enum Store<'a, 'g> {
    /// Store the block to `y`.
    Plain,
    /// Evaluate the epilogue on the block in registers and store its
    /// outputs (the accumulator itself only if it is a kernel output).
    Fused(&'a Epilogue<'a, 'g>, &'a EpPlane),
}

impl Store<'_, '_> {
    /// A fused epilogue's per-row state for output rows `[r, r + rb)`.
    fn rows(&self, e: &mut Emit<'_>, r: Value, rb: usize) -> Option<Vec<EpRow>> {
        match self {
            Store::Plain => None,
            Store::Fused(epi, p) => Some(
                (0..rb)
                    .map(|rho| {
                        let row = e.b.ins().iadd_imm_s(r, rho as i64);
                        epi.row(e, p, row)
                    })
                    .collect(),
            ),
        }
    }
}

/// A conv epilogue evaluated on each output block in registers, the same
/// per-point operations as [`super::elementwise::emit`] performs on the
/// stored plane, saving that second pass; except that a per-plane bias
/// may start the sum instead of being added to it
/// ([`Epilogue::extra_splat`]), which rounds differently.
pub(crate) struct Epilogue<'a, 'g> {
    spec: &'a super::elementwise::EwSpec<'g>,
}

impl<'a, 'g> Epilogue<'a, 'g> {
    /// `Some` when every value is f32 over an NCHW domain, every operand
    /// read has unit or zero column stride, every output unit column
    /// stride, and the one preset is the accumulator (plus an optional
    /// scaled extra). With `overlap_ok` false (the last block of a row
    /// overlaps the previous one, recomputing outputs), an operand read
    /// from a buffer that is also written is refused.
    pub fn new(spec: &'a super::elementwise::EwSpec<'g>, overlap_ok: bool) -> Option<Self> {
        use dnnc_ir::DType;
        if spec.domain.len() != 4 || spec.preset.len() != 1 {
            return None;
        }
        let col_ok = |o: &super::elementwise::Operand| {
            o.dtype == DType::F32 && o.strides.len() == 4 && o.strides[3] <= 1
        };
        let (_, _, extra) = &spec.preset[0];
        let mut reads: Vec<&super::elementwise::Operand> = spec.inputs.values().collect();
        if let Some((x, _)) = extra {
            reads.push(x);
        }
        if !reads.iter().all(|o| col_ok(o)) {
            return None;
        }
        if !spec
            .outputs
            .iter()
            .all(|(_, o)| col_ok(o) && o.strides[3] == 1)
        {
            return None;
        }
        if !overlap_ok
            && reads
                .iter()
                .any(|r| spec.outputs.iter().any(|(_, o)| o.arg == r.arg))
        {
            return None;
        }
        let f32_only = spec.nodes.iter().all(|&n| {
            let node = spec.g.node(n);
            !node.outputs.is_empty()
                && node
                    .outputs
                    .iter()
                    .all(|&v| spec.g.value(v).ty.dtype == DType::F32)
                && super::group::per_point(&node.op)
                && !transcendental(&node.op)
        });
        f32_only.then_some(Epilogue { spec })
    }

    /// How operand `o` is read on row `row` of plane (`n`, `co`): a
    /// splatted value when it is constant along the row (a bias), else the
    /// byte address of the row's first element.
    fn access(e: &mut Emit<'_>, o: &super::elementwise::Operand, idx: [Value; 3]) -> Access {
        let off = e.linear(None, &idx, &o.strides[..3]);
        let base = e.bufs[o.arg];
        if o.strides[3] == 0 {
            let s = e.load_f32(base, off);
            Access::Splat(e.splat(s))
        } else {
            Access::Row(e.addr(base, off, 4))
        }
    }

    /// Reads and addresses for planes of image `n`, channel `co`: operands
    /// constant over the whole plane are loaded here, once per plane.
    pub fn plane(&self, e: &mut Emit<'_>, n: Value, co: Value) -> EpPlane {
        let z = e.ci(0);
        let mut consts = std::collections::HashMap::new();
        for (key, o) in self.operands() {
            if o.strides[2] == 0 && o.strides[3] == 0 {
                consts.insert(key, Self::access(e, o, [n, co, z]));
            }
        }
        EpPlane { n, co, consts }
    }

    /// Reads and addresses for output row `row` of `p`'s plane.
    pub fn row(&self, e: &mut Emit<'_>, p: &EpPlane, row: Value) -> EpRow {
        let mut at = std::collections::HashMap::new();
        for (key, o) in self.operands() {
            let a = match p.consts.get(&key) {
                Some(&a) => a,
                None => Self::access(e, o, [p.n, p.co, row]),
            };
            at.insert(key, a);
        }
        EpRow { at }
    }

    /// Every operand read or written, keyed: `In(node, k)` for inputs,
    /// `Extra` for the preset's scaled extra, `Out(i)` for output `i`.
    fn operands(&self) -> Vec<(OpKey, &super::elementwise::Operand)> {
        let spec = self.spec;
        let mut v: Vec<(OpKey, &super::elementwise::Operand)> = spec
            .inputs
            .iter()
            .map(|(&(n, k), o)| (OpKey::In(n, k), o))
            .collect();
        if let Some((x, _)) = &spec.preset[0].2 {
            v.push((OpKey::Extra, x));
        }
        v.extend(
            spec.outputs
                .iter()
                .enumerate()
                .map(|(i, (_, o))| (OpKey::Out(i), o)),
        );
        v
    }

    /// The preset's extra term (a conv's bias) on row `r` as one splatted
    /// vector, when it is constant along the row and unscaled: a sum may
    /// then start from it ([`Epilogue::apply`] with `extra_in_acc`).
    pub fn extra_splat(&self, r: &EpRow) -> Option<Value> {
        match (&self.spec.preset[0].2, r.at.get(&OpKey::Extra)) {
            (Some((_, scale)), Some(Access::Splat(v))) if *scale == 1.0 => Some(*v),
            _ => None,
        }
    }

    /// Evaluates the epilogue on accumulator block `acc`, the four
    /// columns at byte offset `qb + o` of row `r` (`qb` a value, `o` a
    /// constant), and stores every kernel output there. `extra_in_acc`:
    /// the sum started from [`Epilogue::extra_splat`], so the extra term
    /// is not added again.
    pub fn apply(
        &self,
        e: &mut Emit<'_>,
        r: &EpRow,
        acc: Value,
        qb: Value,
        o: i32,
        extra_in_acc: bool,
    ) -> Result<(), String> {
        use super::elementwise::{eval, Ev};
        let spec = self.spec;
        let read = |e: &mut Emit<'_>, key: OpKey| -> Value {
            match r.at[&key] {
                Access::Splat(v) => v,
                Access::Row(p) => {
                    let a = e.b.ins().iadd(p, qb);
                    e.b.ins().load(F32X4, mem(), a, o)
                }
            }
        };
        let mut vals = std::collections::HashMap::new();
        let (v, _, extra) = &spec.preset[0];
        let val = match extra {
            Some(_) if extra_in_acc => acc,
            Some((_, scale)) => {
                let ex = read(e, OpKey::Extra);
                let ex = if *scale == 1.0 {
                    ex
                } else {
                    let s = e.vf(*scale);
                    e.b.ins().fmul(ex, s)
                };
                e.b.ins().fadd(acc, ex)
            }
            None => acc,
        };
        vals.insert(*v, Ev::F(val));
        let mut loaded = std::collections::HashMap::new();
        for &n in &spec.nodes {
            let node = spec.g.node(n);
            let mut args = Vec::with_capacity(node.inputs.len());
            for (k, v) in node.inputs.iter().enumerate() {
                let a = match vals.get(v) {
                    Some(&a) => a,
                    None => {
                        if !spec.inputs.contains_key(&(n, k)) {
                            return Err(format!("operand {k} has no source in the kernel"));
                        }
                        *loaded
                            .entry((n, k))
                            .or_insert_with(|| Ev::F(read(e, OpKey::In(n, k))))
                    }
                };
                args.push(a);
            }
            let out = eval(e, &node.op, &args)?;
            vals.insert(node.outputs[0], out);
        }
        for (i, (v, _)) in spec.outputs.iter().enumerate() {
            let Some(Ev::F(x)) = vals.get(v).copied() else {
                return Err(format!(
                    "output `%{}` is not an f32 value",
                    spec.g.value(*v).name
                ));
            };
            let Access::Row(p) = r.at[&OpKey::Out(i)] else {
                return Err("an output with column stride 0".into());
            };
            let a = e.b.ins().iadd(p, qb);
            e.b.ins().store(mem(), x, a, o);
        }
        Ok(())
    }
}

/// Names an operand of an [`Epilogue`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum OpKey {
    /// Operand `k` of node `n`.
    In(dnnc_ir::NodeId, usize),
    /// The preset's scaled extra.
    Extra,
    /// Output `i`.
    Out(usize),
}

/// How an epilogue operand is read on one row.
#[derive(Clone, Copy)]
enum Access {
    /// The same value at every column, already splatted.
    Splat(Value),
    /// The byte address of the row's first element.
    Row(Value),
}

/// An epilogue's per-plane state (see [`Epilogue::plane`]).
pub(crate) struct EpPlane {
    n: Value,
    co: Value,
    consts: std::collections::HashMap<OpKey, Access>,
}

/// An epilogue's per-row reads and addresses (see [`Epilogue::row`]).
pub(crate) struct EpRow {
    at: std::collections::HashMap<OpKey, Access>,
}
