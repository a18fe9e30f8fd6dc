//! Reductions as generated loop nests: pooling windows, global pools,
//! Reduce*, Softmax/LogSoftmax, LRN and the instance/layer normalisations.
//! Each output element (or lane) is reduced in registers; contiguous
//! reductions accumulate in f32x4 and combine the lanes at the end.

use super::elementwise::{bcast_strides, contiguous};
use super::emit::Emit;
use super::math;
use super::KCtx;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, F32X4, I64};
use cranelift_codegen::ir::{InstBuilder, Value};
use cranelift_frontend::Variable;
use dnnc_ir::infer::norm_axis;
use dnnc_ir::op::{Lrn, Pool2d, ReduceKind};
use dnnc_ir::{DType, Op};

/// Whether the CPU backend lowers `op` as a reduction.
pub(crate) fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::MaxPool(_)
            | Op::AveragePool(_)
            | Op::GlobalAveragePool
            | Op::GlobalMaxPool
            | Op::Reduce { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Lrn(_)
            | Op::InstanceNormalization { .. }
            | Op::LayerNormalization { .. }
    )
}

/// Lowers a one-node reduction kernel.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    let n = c.anchor();
    let node = c.g.node(n);
    let xs = c.g.value(node.inputs[0]).ty.shape.clone();
    if c.g.value(node.inputs[0]).ty.dtype != DType::F32 {
        return Err("input must be f32".into());
    }
    if let Op::MaxPool(p) | Op::AveragePool(p) = &node.op {
        if p.data == dnnc_ir::op::DataLayout::Nchw8c {
            let max = matches!(node.op, Op::MaxPool(_));
            return super::blocked::lower_pool(e, c, p, max);
        }
    }
    let x = e.bufs[c.arg(node.inputs[0])?];
    let acc = super::contraction::acc_arg(c)?;
    let y = e.bufs[acc];
    let ys = c.g.value(node.outputs[0]).ty.shape.clone();
    let epi = super::contraction::epilogue(c, acc, None)?;
    // Task units (the kernel ABI's split): `(units, elements per unit)`,
    // each unit a contiguous run of the result; the fused epilogue then
    // runs over the same units. `None`: the lowering does not split.
    let units = split_units(&node.op, &xs, &ys);
    let split = units.filter(|&(u, per)| {
        u > 1
            && epi
                .as_ref()
                .is_none_or(|s| unit_prefix(&s.domain, u, per).is_some())
    });
    let on = split.is_some();
    match &node.op {
        Op::MaxPool(p) => {
            // One image's stride-2 max pool onto planes of at least
            // [`BAND_MIN_ROWS`] rows, without an epilogue, splits by
            // bands of output rows across every plane ([`Split::RowBands`]).
            let bands =
                ys.len() == 4 && ys[0] == 1 && p.strides == [2, 2] && ys[2] >= BAND_MIN_ROWS;
            let how = if on && epi.is_none() && bands {
                Split::RowBands
            } else if on {
                Split::Planes
            } else {
                Split::None
            };
            // Planes padded to whole lines (`planes`) lie their strides
            // apart; the pool's own code walks the planes by them.
            let strides = (
                c.plane_stride(node.inputs[0]),
                c.plane_stride(node.outputs[0]),
            );
            let frame =
                (strides != (xs[2..].iter().product(), ys[2..].iter().product())).then(|| Frame {
                    planes: xs[0] * xs[1],
                    x0: e.ci(0),
                    x_plane: strides.0,
                    y0: e.ci(0),
                    y_plane: strides.1,
                });
            if frame.is_some() && (epi.is_some() || xs.len() != 4) {
                return Err("padded planes need a max pool without an epilogue".into());
            }
            pool(e, p, &xs, &ys, x, y, true, how, frame)?
        }
        Op::AveragePool(p) => {
            let how = if on { Split::Planes } else { Split::None };
            pool(e, p, &xs, &ys, x, y, false, how, None)?
        }
        Op::GlobalAveragePool => {
            let axes: Vec<usize> = (2..xs.len()).collect();
            reduce(e, &xs, &axes, ReduceKind::Mean, x, y, on)?;
        }
        Op::GlobalMaxPool => {
            let axes: Vec<usize> = (2..xs.len()).collect();
            reduce(e, &xs, &axes, ReduceKind::Max, x, y, on)?;
        }
        Op::Reduce { kind, axes, .. } => {
            let ax = dnnc_ir::infer::reduce_axes(axes, xs.len())?;
            reduce(e, &xs, &ax, *kind, x, y, on)?;
        }
        Op::Softmax { axis } => softmax(e, &xs, norm_axis(*axis, xs.len())?, x, y, false, on)?,
        Op::LogSoftmax { axis } => softmax(e, &xs, norm_axis(*axis, xs.len())?, x, y, true, on)?,
        Op::Lrn(p) => lrn(e, p, &xs, x, y)?,
        Op::InstanceNormalization { epsilon } => {
            let (sc, bi) = (
                e.bufs[c.arg(node.inputs[1])?],
                e.bufs[c.arg(node.inputs[2])?],
            );
            let (nn, ch) = (xs[0], xs[1]);
            let lane: Vec<usize> = xs[2..].to_vec();
            let l: usize = lane.iter().product();
            let all = (e.ci(0), e.ci((nn * ch) as i64));
            normalize(e, all, l, x, y, *epsilon, |e, o, _j| {
                // channel = o % C; per-lane scale and bias are constants.
                let cc = e.ci(ch as i64);
                let chn = e.b.ins().urem(o, cc);
                (e.load_f32(sc, chn), e.load_f32(bi, chn))
            });
        }
        Op::LayerNormalization { axis, epsilon } => {
            let ax = norm_axis(*axis, xs.len())?;
            let lane = xs[ax..].to_vec();
            let l: usize = lane.iter().product();
            let outer: usize = xs[..ax].iter().product();
            let sshape = c.g.value(node.inputs[1]).ty.shape.clone();
            let s_str = bcast_strides(&sshape, &lane).ok_or("scale does not broadcast")?;
            let sc = e.bufs[c.arg(node.inputs[1])?];
            let bias = match node.inputs.get(2) {
                Some(&b) => {
                    let bs = c.g.value(b).ty.shape.clone();
                    Some((
                        e.bufs[c.arg(b)?],
                        bcast_strides(&bs, &lane).ok_or("bias does not broadcast")?,
                    ))
                }
                None => None,
            };
            // One normalised axis with a scale and a bias of its length
            // (a transformer's): four lanes at a time.
            let rows_ok =
                lane.len() == 1 && s_str == [1] && bias.as_ref().is_none_or(|(_, b)| b == &[1]);
            if rows_ok {
                let (lo, hi) = plane_range(e, outer, "normalised rows", on)?;
                normalize_rows(e, (lo, hi), l, (x, y), *epsilon, (sc, bias.map(|b| b.0)));
                finish(e, epi, split)?;
                return Ok(Vec::new());
            }
            let (lo, hi) = plane_range(e, outer, "normalised rows", on)?;
            let lane_c = contiguous(&lane);
            normalize(e, (lo, hi), l, x, y, *epsilon, |e, _o, j| {
                // Decompose the flat lane index into the lane's axes.
                let mut so: Option<Value> = None;
                let mut bo: Option<Value> = None;
                let mut rem = j;
                for (d, &len) in lane.iter().enumerate() {
                    let q = e.b.ins().udiv_imm_u(rem, lane_c[d]);
                    rem = e.b.ins().urem_imm_u(rem, lane_c[d]);
                    let _ = len;
                    if s_str[d] != 0 {
                        let t = e.b.ins().imul_imm_s(q, s_str[d]);
                        so = Some(so.map_or(t, |s| e.b.ins().iadd(s, t)));
                    }
                    if let Some((_, bs)) = &bias {
                        if bs[d] != 0 {
                            let t = e.b.ins().imul_imm_s(q, bs[d]);
                            bo = Some(bo.map_or(t, |s| e.b.ins().iadd(s, t)));
                        }
                    }
                }
                let so = so.unwrap_or_else(|| e.ci(0));
                let s = e.load_f32(sc, so);
                let b = match &bias {
                    Some((bp, _)) => {
                        let bo = bo.unwrap_or_else(|| e.ci(0));
                        e.load_f32(*bp, bo)
                    }
                    None => e.cf(0.0),
                };
                (s, b)
            });
        }
        other => return Err(format!("{} is not a reduction", other.name())),
    }
    finish(e, epi, split)?;
    Ok(Vec::new())
}

/// The fused elementwise epilogue, in place over the result (over this
/// task's units when the kernel splits).
fn finish(
    e: &mut Emit<'_>,
    epi: Option<super::elementwise::EwSpec<'_>>,
    split: Option<(usize, usize)>,
) -> Result<(), String> {
    if let Some(spec) = epi {
        match split.and_then(|(u, per)| unit_prefix(&spec.domain, u, per)) {
            Some(k) => super::elementwise::emit_split(e, &spec, k)?,
            None => {
                let sub = super::elementwise::SubDomain::full(&spec.domain);
                super::elementwise::emit(e, &spec, &sub)?;
            }
        }
    }
    Ok(())
}

/// The task units of a reduction kernel, if it can split: `(units,
/// result elements per unit)`. Pools split over the `N*C` planes,
/// reductions and global pools over their result elements, Softmax over
/// its lanes (each the `len` elements along the axis; contiguous runs of
/// the result only when the axis is the last non-unit one).
fn split_units(op: &Op, xs: &[usize], ys: &[usize]) -> Option<(usize, usize)> {
    match op {
        Op::MaxPool(_) | Op::AveragePool(_) if ys.len() == 4 => {
            Some((ys[0] * ys[1], ys[2] * ys[3]))
        }
        Op::Reduce { kind, axes, .. } => {
            let ax = dnnc_ir::infer::reduce_axes(axes, xs.len()).ok()?;
            let results: usize = ys.iter().product();
            Some(match vector_lanes(xs, &ax, *kind) {
                Some(lanes) => (results / lanes, lanes),
                None => (results, 1),
            })
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => Some((ys.iter().product(), 1)),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let ax = norm_axis(*axis, xs.len()).ok()?;
            let inner: usize = xs[ax + 1..].iter().product();
            let outer: usize = xs[..ax].iter().product();
            // Units are lanes; with `inner > 1` a lane is strided, so say
            // "per unit 0" (never a contiguous run) unless inner == 1.
            Some((outer * inner, if inner == 1 { xs[ax] } else { 0 }))
        }
        // Rows of the normalised axes, each a contiguous run.
        Op::LayerNormalization { axis, .. } => {
            let ax = norm_axis(*axis, xs.len()).ok()?;
            Some((xs[..ax].iter().product(), xs[ax..].iter().product()))
        }
        _ => None,
    }
}

/// The innermost axis's extent when a sum or mean keeps it and it holds
/// whole f32x4 vectors (a channel-blocked tensor's 8 lanes, its planes
/// reduced): such a reduction runs four results per vector
/// ([`reduce_lanes`]). The global average pool of MobileNet-V2's blocked
/// `1280 x 7 x 7` result took 44 µs one element at a time.
fn vector_lanes(xs: &[usize], axes: &[usize], kind: ReduceKind) -> Option<usize> {
    let last = xs.len().checked_sub(1)?;
    let lanes = xs[last];
    let fits = matches!(kind, ReduceKind::Mean | ReduceKind::Sum)
        && !axes.is_empty()
        && !axes.contains(&last)
        && lanes.is_multiple_of(4);
    fits.then_some(lanes)
}

/// [`reduce`] when [`vector_lanes`] holds: per kept outer index and
/// group of four lanes, one f32x4 accumulator over the reduced positions
/// in order, so each result is the scalar loop's sum, bitwise. A task
/// unit is one outer index's `lanes` results (`split_units`). Units go
/// [`LANE_UNITS`] at a time, their chains of adds interleaved.
fn reduce_lanes(
    e: &mut Emit<'_>,
    xs: &[usize],
    axes: &[usize],
    kind: ReduceKind,
    lanes: usize,
    (x, y): (Value, Value),
    split: bool,
) -> Result<(), String> {
    let last = xs.len() - 1;
    let xstr = contiguous(xs);
    let outer: Vec<usize> = (0..last).filter(|a| !axes.contains(a)).collect();
    let outer_dims: Vec<usize> = outer.iter().map(|&a| xs[a]).collect();
    let outer_str: Vec<i64> = outer.iter().map(|&a| xstr[a]).collect();
    let out_str: Vec<i64> = contiguous(&outer_dims)
        .iter()
        .map(|&s| s * lanes as i64)
        .collect();
    let rdims: Vec<usize> = axes.iter().map(|&a| xs[a]).collect();
    let rstr: Vec<i64> = axes.iter().map(|&a| xstr[a]).collect();
    let count: usize = rdims.iter().product();
    let units: usize = outer_dims.iter().product();
    let unit_str = contiguous(&outer_dims);
    // Where unit `f` (a flat outer index) reads and writes.
    let unit_at = |e: &mut Emit<'_>, f: Value| -> (Value, Value) {
        let idx: Vec<Value> = (0..outer_dims.len())
            .map(|d| {
                let q = e.b.ins().udiv_imm_u(f, unit_str[d]);
                if d == 0 {
                    q
                } else {
                    e.b.ins().urem_imm_u(q, outer_dims[d] as i64)
                }
            })
            .collect();
        let xo = e.linear(None, &idx, &outer_str);
        let yo = e.linear(None, &idx, &out_str);
        (xo, yo)
    };
    // Units `f..f + n`, every lane group of each in one loop: independent
    // chains of adds (one group at a time, or one unit, was bound by the
    // add latency: the global pools of EfficientNet-B0's blocked
    // squeeze-excitations read 15 GB/s).
    let run = |e: &mut Emit<'_>, f: Value, n: usize| {
        let at: Vec<(Value, Value)> = (0..n)
            .map(|j| {
                let fj = e.b.ins().iadd_imm_s(f, j as i64);
                let (xo, yo) = unit_at(e, fj);
                (e.pin(xo), yo)
            })
            .collect();
        let zero = e.vf(0.0);
        let accs: Vec<Vec<_>> = (0..n)
            .map(|_| (0..lanes / 4).map(|_| e.var(F32X4, zero)).collect())
            .collect();
        e.for_nest(&rdims, &mut |e, ri| {
            let r = e.linear(None, ri, &rstr);
            for (&(xo, _), unit) in at.iter().zip(&accs) {
                let o = e.b.ins().iadd(xo, r);
                for (g, &acc) in unit.iter().enumerate() {
                    let og = e.b.ins().iadd_imm_s(o, (g * 4) as i64);
                    let v = e.load_v(x, og);
                    let a = e.b.use_var(acc);
                    let nv = e.b.ins().fadd(a, v);
                    e.b.def_var(acc, nv);
                }
            }
        });
        let inv = (kind == ReduceKind::Mean).then(|| e.vf(1.0 / count.max(1) as f32));
        for (&(_, yo), unit) in at.iter().zip(&accs) {
            for (g, &acc) in unit.iter().enumerate() {
                let mut r = e.b.use_var(acc);
                if let Some(inv) = inv {
                    r = e.b.ins().fmul(r, inv);
                }
                let at = e.b.ins().iadd_imm_s(yo, (g * 4) as i64);
                e.store_v(r, y, at);
            }
        }
    };
    let (lo, hi) = if split && units > 1 {
        e.task_range(units, "result rows")?
    } else {
        (e.ci(0), e.ci(units as i64))
    };
    let span = e.b.ins().isub(hi, lo);
    let whole = e.b.ins().udiv_imm_u(span, LANE_UNITS as i64);
    let whole = e.b.ins().imul_imm_s(whole, LANE_UNITS as i64);
    let mid = e.b.ins().iadd(lo, whole);
    e.for_range(lo, mid, LANE_UNITS as i64, |e, f| run(e, f, LANE_UNITS));
    e.for_range(mid, hi, 1, |e, f| run(e, f, 1));
    Ok(())
}

/// Units a lane reduction ([`reduce_lanes`]) runs together: with 8-lane
/// blocks, eight independent chains of f32x4 adds.
const LANE_UNITS: usize = 4;

/// The number of leading `domain` axes whose flat index is the unit,
/// when `domain` is exactly `units` contiguous runs of `per` elements.
fn unit_prefix(domain: &[usize], units: usize, per: usize) -> Option<usize> {
    if per == 0 || domain.iter().product::<usize>() != units * per {
        return None;
    }
    let mut p = 1usize;
    for k in 0..=domain.len() {
        if p == units {
            return Some(k);
        }
        if k < domain.len() {
            p *= domain[k];
        }
    }
    None
}

/// A scalar f32 function through its f32x4 implementation.
fn scalar(e: &mut Emit<'_>, x: Value, f: fn(&mut Emit<'_>, Value) -> Value) -> Value {
    let v = e.splat(x);
    let r = f(e, v);
    e.lane0(r)
}

/// `max(a, b)` that keeps a NaN from either side (numpy semantics), done
/// in a vector register: Cranelift's scalar `fmax` and `select` on floats
/// lower to branches, which mispredict on data; the vector `fmax` does not.
fn nan_max(e: &mut Emit<'_>, m: Value, v: Value) -> Value {
    let a = e.b.ins().scalar_to_vector(F32X4, m);
    let b = e.b.ins().scalar_to_vector(F32X4, v);
    let r = e.b.ins().fmax(a, b);
    e.b.ins().extractlane(r, 0)
}

/// Runtime `[lo, hi)` of window taps `i < k` with `o*s - pad + i*d` in
/// `[0, size)`, plus (for average pooling) the count of taps inside the
/// padded extent `size + pad_end`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn tap_range(
    e: &mut Emit<'_>,
    o: Value,
    s: usize,
    pad: usize,
    d: usize,
    k: usize,
    size: usize,
    pad_end: usize,
) -> (Value, Value, Value) {
    let hs = e.b.ins().imul_imm_s(o, s as i64);
    let hs = e.b.ins().iadd_imm_s(hs, -(pad as i64));
    let zero = e.ci(0);
    let kk = e.ci(k as i64);
    let ceil_div = |e: &mut Emit<'_>, v: Value| -> Value {
        let v = e.b.ins().smax(v, zero);
        if d == 1 {
            v
        } else {
            let t = e.b.ins().iadd_imm_s(v, d as i64 - 1);
            e.b.ins().udiv_imm_u(t, d as i64)
        }
    };
    let neg = e.b.ins().ineg(hs);
    let lo = ceil_div(e, neg);
    let lo = e.b.ins().smin(lo, kk);
    let sz = e.ci(size as i64);
    let rem = e.b.ins().isub(sz, hs);
    let hi = ceil_div(e, rem);
    let hi = e.b.ins().smin(hi, kk);
    let hi = e.b.ins().smax(hi, lo);
    let szp = e.ci((size + pad_end) as i64);
    let remp = e.b.ins().isub(szp, hs);
    let hip = ceil_div(e, remp);
    let hip = e.b.ins().smin(hip, kk);
    (lo, hi, hip)
}

/// Fewest output rows a max pool splits into bands of ([`Split::RowBands`]):
/// on smaller planes each task's per-plane work (the padded copy's
/// setup, the NaN check) outweighs the locality (SqueezeNet at two
/// threads: its 27x27 pool 0.055 → 0.069 ms in bands, its 13x13 one
/// 0.036 → 0.053).
const BAND_MIN_ROWS: usize = 32;

/// How a pooling kernel shares its work out as tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Split {
    /// It does not split.
    None,
    /// Over its `N*C` output planes.
    Planes,
    /// Over bands of output rows, each task every plane's rows of its
    /// band: the GEMM before a stem's pool splits by pixels, so each core
    /// then reads the rows it wrote, and so does the GEMM after it
    /// (SqueezeNet at two threads: its first pool, 64 planes of 111x111
    /// from the stem conv, 0.122-0.127 → 0.115-0.116 ms, the 1x1 conv
    /// after it 0.043-0.044 → 0.038; 0.17 ms at one thread either way).
    RowBands,
}

/// Where a max pool reads and writes its planes when it runs inside a
/// conv kernel that absorbed it ([`super::group::absorb_pools`]): one
/// band of its output rows at a time, from the conv rows the kernel just
/// computed into a scratch.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    /// Planes (channels) of the band.
    pub planes: usize,
    /// Element offset of plane 0's first row in the input buffer.
    pub x0: Value,
    /// Elements from one input plane to the next.
    pub x_plane: usize,
    /// Element offset of plane 0's first row of the band in the output.
    pub y0: Value,
    /// Elements from one output plane to the next.
    pub y_plane: usize,
}

/// A max pool `p` of planes `h x w` into `oh x ow` placed by `frame`,
/// on this task (no split of its own): the same code, NaN handling
/// included, as a pool kernel's (`xs`, `ys` the band's NCHW shapes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn max_pool_band(
    e: &mut Emit<'_>,
    p: &Pool2d,
    xs: &[usize],
    ys: &[usize],
    x: Value,
    y: Value,
    frame: Frame,
) -> Result<(), String> {
    pool(e, p, xs, ys, x, y, true, Split::None, Some(frame))
}

/// MaxPool / AveragePool over NCHW. Output positions whose whole window
/// lies inside the input (a static rectangle) use a fully unrolled window;
/// the border computes each window's valid taps at run time.
#[allow(clippy::too_many_arguments)]
fn pool(
    e: &mut Emit<'_>,
    p: &Pool2d,
    xs: &[usize],
    ys: &[usize],
    x: Value,
    y: Value,
    max: bool,
    how: Split,
    frame: Option<Frame>,
) -> Result<(), String> {
    let split = how != Split::None;
    let (&[n, c, h, w], &[_, _, oh, ow]) = (xs, ys) else {
        return Err("pooling needs rank-4 NCHW tensors".into());
    };
    // Element offsets of plane `pl` in `x` and `y`.
    let offsets = move |e: &mut Emit<'_>, pl: Value| match frame {
        Some(f) => {
            let xo = e.b.ins().imul_imm_s(pl, f.x_plane as i64);
            let xo = e.b.ins().iadd(xo, f.x0);
            let yo = e.b.ins().imul_imm_s(pl, f.y_plane as i64);
            (xo, e.b.ins().iadd(yo, f.y0))
        }
        None => (
            e.b.ins().imul_imm_s(pl, (h * w) as i64),
            e.b.ins().imul_imm_s(pl, (oh * ow) as i64),
        ),
    };
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    // Interior: every tap valid.
    let inter = |out: usize, size: usize, s: usize, pad: usize, d: usize, k: usize| {
        (0..k).fold((0usize, out), |(lo, hi), t| {
            let (a, b) = super::contraction::valid_range(out, size, s, pad, t, d);
            (lo.max(a), hi.min(b))
        })
    };
    let (rlo, rhi) = inter(oh, h, p.strides[0], p.pads[0], p.dilations[0], kh);
    let (qlo, qhi) = inter(ow, w, p.strides[1], p.pads[1], p.dilations[1], kw);
    let unroll = kh * kw <= 49 && rhi > rlo && qhi > qlo;
    let (rlo, rhi, qlo, qhi) = if unroll {
        (rlo, rhi, qlo, qhi)
    } else {
        (oh, oh, ow, ow)
    };
    let planes = frame.map_or(n * c, |f| f.planes);
    let win = super::direct::Window {
        h,
        w,
        oh,
        ow,
        kh,
        kw,
        sh: p.strides[0],
        sw: p.strides[1],
        dh: p.dilations[0],
        dw: p.dilations[1],
        pt: p.pads[0],
        pl: p.pads[1],
    };
    let fast = super::direct::PadPlane::new(win);
    // Output rows `[a, b)` of the plane, within `band` (run-time rows)
    // when given: the loop bounds.
    let rows = |e: &mut Emit<'_>, a: usize, b: usize, band: Option<(Value, Value)>| {
        let (s, en) = (e.ci(a as i64), e.ci(b as i64));
        match band {
            Some((r0, r1)) => (e.b.ins().smax(s, r0), e.b.ins().smin(en, r1)),
            None => (s, en),
        }
    };
    // The exact plane: every output row, or those of `band`.
    let plane = |e: &mut Emit<'_>, xo: Value, yo: Value, band: Option<(Value, Value)>| {
        let generic_rows = |e: &mut Emit<'_>, a: usize, b: usize| {
            if b > a {
                let (s, en) = rows(e, a, b, band);
                e.for_range(s, en, 1, |e, r| {
                    let s = e.ci(0);
                    let en = e.ci(ow as i64);
                    pool_generic(e, p, (h, w, ow), x, y, xo, yo, r, s, en, max);
                });
            }
        };
        generic_rows(e, 0, rlo.min(oh));
        if rhi > rlo {
            let (s, en) = rows(e, rlo, rhi, band);
            e.for_range(s, en, 1, |e, r| {
                let s = e.ci(0);
                let en = e.ci(qlo as i64);
                pool_generic(e, p, (h, w, ow), x, y, xo, yo, r, s, en, max);
                let s = e.ci(qhi as i64);
                let en = e.ci(ow as i64);
                pool_generic(e, p, (h, w, ow), x, y, xo, yo, r, s, en, max);
                let (sw, pw, dw) = (p.strides[1], p.pads[1], p.dilations[1]);
                let qv = vec4_end(qlo, qhi, sw, pw, (kw - 1) * dw, w);
                if qv > qlo {
                    // Four adjacent interior outputs per iteration, one
                    // f32x4 lane each; lane-wise the same ops as the
                    // scalar window below (so NaNs propagate alike).
                    let s = e.ci(qlo as i64);
                    let en = e.ci(qv as i64);
                    e.for_range(s, en, 4, |e, q| {
                        let hs = e.b.ins().imul_imm_s(r, p.strides[0] as i64);
                        let hs = e.b.ins().iadd_imm_s(hs, -(p.pads[0] as i64));
                        let row0 = e.b.ins().imul_imm_s(hs, w as i64);
                        let row0 = e.b.ins().iadd(row0, xo);
                        let ws = e.b.ins().imul_imm_s(q, sw as i64);
                        let ws = e.b.ins().iadd_imm_s(ws, -(pw as i64));
                        let base = e.b.ins().iadd(row0, ws);
                        let bp = e.addr(x, base, 4);
                        let mut acc: Option<Value> = None;
                        for i in 0..kh {
                            for j in 0..kw {
                                let off = i * p.dilations[0] * w + j * dw;
                                let v = e.load_strided4(bp, off, sw);
                                acc = Some(match acc {
                                    None => v,
                                    Some(a) if max => e.b.ins().fmax(a, v),
                                    Some(a) => e.b.ins().fadd(a, v),
                                });
                            }
                        }
                        let a = acc.unwrap_or_else(|| e.vf(0.0));
                        let out = if max {
                            a
                        } else {
                            let inv = e.vf(1.0 / (kh * kw) as f32);
                            e.b.ins().fmul(a, inv)
                        };
                        let oi = e.b.ins().imul_imm_s(r, ow as i64);
                        let oi = e.b.ins().iadd(oi, yo);
                        let oi = e.b.ins().iadd(oi, q);
                        e.store_v(out, y, oi);
                    });
                }
                let s = e.ci(qv as i64);
                let en = e.ci(qhi as i64);
                e.for_range(s, en, 1, |e, q| {
                    let hs = e.b.ins().imul_imm_s(r, p.strides[0] as i64);
                    let hs = e.b.ins().iadd_imm_s(hs, -(p.pads[0] as i64));
                    let row0 = e.b.ins().imul_imm_s(hs, w as i64);
                    let row0 = e.b.ins().iadd(row0, xo);
                    let ws = e.b.ins().imul_imm_s(q, p.strides[1] as i64);
                    let ws = e.b.ins().iadd_imm_s(ws, -(p.pads[1] as i64));
                    let base = e.b.ins().iadd(row0, ws);
                    let bp = e.addr(x, base, 4);
                    let mut acc: Option<Value> = None;
                    for i in 0..kh {
                        for j in 0..kw {
                            let off = (i * p.dilations[0] * w + j * p.dilations[1]) * 4;
                            let v = e.b.ins().load(F32, super::emit::mem(), bp, off as i32);
                            acc = Some(match acc {
                                None => v,
                                Some(a) if max => nan_max(e, a, v),
                                Some(a) => e.b.ins().fadd(a, v),
                            });
                        }
                    }
                    let a = acc.unwrap_or_else(|| e.cf(0.0));
                    let out = if max {
                        a
                    } else {
                        let inv = e.cf(1.0 / (kh * kw) as f32);
                        e.b.ins().fmul(a, inv)
                    };
                    let oi = e.b.ins().imul_imm_s(r, ow as i64);
                    let oi = e.b.ins().iadd(oi, yo);
                    let oi = e.b.ins().iadd(oi, q);
                    e.store_f32(out, y, oi);
                });
            });
        }
        generic_rows(e, rhi.max(rlo), oh);
    };
    // Stride 1 reads the input plane in place, padding as zero vectors
    // and shifted lanes, with no copy (an Inception-v3 block's 3x3 pool on
    // 8x32x13x13: 0.048 -> 0.029 ms); other strides copy into a padded
    // scratch plane.
    let avg_plane =
        super::direct::PadPlane::new_direct(win).or_else(|| super::direct::PadPlane::new(win));
    if let (Some(mut pp), false) = (avg_plane, max) {
        // Average: sums over zero-padded planes (each window's taps in
        // (row, column) order, padding adding +0: the interpreter's sums of
        // the valid taps), then each output divided by its window's count
        // ([`avg_divide`]), as the interpreter divides.
        if !pp.is_direct() {
            pp.init(e, 0.0);
        }
        let one = e.vf(1.0);
        let taps = super::direct::Combine::Fma(vec![one; kh * kw]);
        let (lo, hi) = plane_range(e, planes, "output planes", split)?;
        e.for_range(lo, hi, 1, |e, pl| {
            let (xo, yo) = offsets(e, pl);
            pp.compute(
                e,
                (y, yo),
                &taps,
                (1, 2),
                &super::direct::Store::Plain,
                Some((x, xo, None)),
                None,
            )
            .expect("plain stores cannot fail");
            avg_divide(e, p, (h, w, oh, ow), y, yo);
        });
        return Ok(());
    }
    // Every plane's rows of this task's band, or this task's planes.
    type Share = (Option<(Value, Value)>, (Value, Value));
    let share = |e: &mut Emit<'_>| -> Result<Share, String> {
        Ok(if how == Split::RowBands {
            let band = e.task_range(oh, "bands of output rows (every plane)")?;
            (Some(band), (e.ci(0), e.ci(planes as i64)))
        } else {
            (None, plane_range(e, planes, "output planes", split)?)
        })
    };
    // The plane again with the exact code when `flag` is set: a NaN that
    // a fast path's `maxps` would have dropped.
    let exact_if = |e: &mut Emit<'_>, flag: Value, xo: Value, yo: Value, band| {
        let slow = e.b.create_block();
        let done = e.b.create_block();
        e.b.ins().brif(flag, slow, &[], done, &[]);
        e.b.switch_to_block(slow);
        plane(e, xo, yo, band);
        e.b.ins().jump(done, &[]);
        e.b.switch_to_block(done);
    };
    if let Some(stride) = native_3x3(p, w, ow).filter(|_| max) {
        // The native AVX-512 plane kernel (`dnnc_max_pool_3x3s2` or
        // `dnnc_max_pool_3x3s1`: the same maximum of the valid taps,
        // padding as -inf); a plane holding a NaN is recomputed by the
        // exact code.
        let (band, (lo, hi)) = share(e)?;
        let f = if stride == 1 { e.maxpool1 } else { e.maxpool };
        e.for_range(lo, hi, 1, |e, pl| {
            let (xo, yo) = offsets(e, pl);
            let xp = e.addr(x, xo, 4);
            let yp = e.addr(y, yo, 4);
            let (r0, r1) = band.unwrap_or_else(|| (e.ci(0), e.ci(oh as i64)));
            let dims = [h, w, ow, p.pads[0] | p.pads[1] << 16].map(|v| e.ci(v as i64));
            let call =
                e.b.ins()
                    .call(f, &[xp, yp, dims[0], dims[1], dims[2], dims[3], r0, r1]);
            let rc = e.b.inst_results(call)[0];
            exact_if(e, rc, xo, yo, band);
        });
        return Ok(());
    }
    if let Some(mut pp) = fast {
        // Padded planes with -inf padding and `maxps`; a plane holding a
        // NaN is recomputed by the exact code below, so NaNs propagate as
        // before.
        // Stride 2 compiles in emission order: the e-graph moved each
        // copied vector's NaN check after the whole unrolled copy, which
        // spilled and reloaded every loaded vector (SqueezeNet's pools 0.31
        // → 0.29 ms at one thread, ResNet-18's 0.22 → 0.18, GoogLeNet's
        // first two 0.36 → 0.32). Stride-1 pools measured the same or
        // slower in order (GoogLeNet's inception pools 0.33 → 0.39 ms).
        if win.sw == 2 {
            e.in_order = true;
        }
        pp.init(e, f32::NEG_INFINITY);
        let (band, (lo, hi)) = share(e)?;
        e.for_range(lo, hi, 1, |e, pl| {
            let (xo, yo) = offsets(e, pl);
            let nan = super::direct::nan_mask(e);
            pp.compute(
                e,
                (y, yo),
                &super::direct::Combine::Max,
                (pool_rows(win.sh), 2),
                &super::direct::Store::Plain,
                Some((x, xo, Some(nan))),
                band,
            )
            .expect("plain stores cannot fail");
            let m = e.b.use_var(nan);
            let any = e.b.ins().vany_true(m);
            exact_if(e, any, xo, yo, band);
        });
    } else {
        let (lo, hi) = plane_range(e, planes, "output planes", split)?;
        e.for_range(lo, hi, 1, |e, pl| {
            let (xo, yo) = offsets(e, pl);
            plane(e, xo, yo, None);
        });
    }
    let _ = (IntCC::Equal, I64);
    Ok(())
}

/// The stride of the native 3x3 plane kernel (`dnnc_runtime::cpu::maxpool`)
/// that max pool `p` of rows `w` wide into `ow` runs on: that window,
/// undilated, with stride 2 or 1 both ways, on a machine with AVX-512
/// and a geometry it takes.
fn native_3x3(p: &Pool2d, w: usize, ow: usize) -> Option<usize> {
    let s = p.strides[0];
    (p.kernel == [3, 3]
        && p.strides == [s, s]
        && p.dilations == [1, 1]
        && dnnc_runtime::cpu::maxpool::max_pool_3x3_fits(s, w, ow, p.pads[0], p.pads[1]))
    .then_some(s)
}

/// Divides each output of an average pool's plane `y[yo..]` (the window
/// sums) by its window's count, as the interpreter does: the valid taps,
/// or with `count_include_pad` those inside the padded input. The count
/// is a row count times a column count; rows of equal row count run as
/// one loop, and along a row the blocks of four whose counts are all the
/// interior one run as a loop dividing by one splat, the edge blocks with
/// their own lanes.
fn avg_divide(
    e: &mut Emit<'_>,
    p: &Pool2d,
    (h, w, oh, ow): (usize, usize, usize, usize),
    y: Value,
    yo: Value,
) {
    let count = |o: usize, size: usize, s: usize, (lo, hi): (usize, usize), k: usize| {
        let start = (o * s) as i64 - lo as i64;
        let (a, b) = if p.count_include_pad {
            (start, (start + k as i64).min((size + hi) as i64))
        } else {
            (start.max(0), (start + k as i64).min(size as i64))
        };
        (b - a).max(0) as usize
    };
    let (kh, kw) = (p.kernel[0], p.kernel[1]);
    let ch: Vec<usize> = (0..oh)
        .map(|r| count(r, h, p.strides[0], (p.pads[0], p.pads[2]), kh))
        .collect();
    let cw: Vec<usize> = (0..ow)
        .map(|c| count(c, w, p.strides[1], (p.pads[1], p.pads[3]), kw))
        .collect();
    let mut r = 0;
    while r < oh {
        let mut r1 = r + 1;
        while r1 < oh && ch[r1] == ch[r] {
            r1 += 1;
        }
        let rows = ch[r];
        let (s, en) = (e.ci(r as i64), e.ci(r1 as i64));
        e.for_range(s, en, 1, |e, rr| {
            let row = e.b.ins().imul_imm_s(rr, ow as i64);
            let row = e.b.ins().iadd(row, yo);
            let div = |c: usize| (rows * cw[c]) as f32;
            let mut j = 0;
            while j + 4 <= ow {
                let uniform = (j..j + 4).all(|c| cw[c] == cw[j]);
                if uniform {
                    // A run of blocks with the same count: one loop.
                    let mut j1 = j + 4;
                    while j1 + 4 <= ow && (j1..j1 + 4).all(|c| cw[c] == cw[j]) {
                        j1 += 4;
                    }
                    let d = e.vf(div(j));
                    let (a, b) = (e.ci(j as i64), e.ci(j1 as i64));
                    e.for_range(a, b, 4, |e, jj| {
                        let i = e.b.ins().iadd(row, jj);
                        let v = e.load_v(y, i);
                        let q = e.b.ins().fdiv(v, d);
                        e.store_v(q, y, i);
                    });
                    j = j1;
                } else {
                    let mut d = e.vf(div(j));
                    for l in 1..4 {
                        let c = e.cf(div(j + l));
                        d = e.b.ins().insertlane(d, c, l as u8);
                    }
                    let i = e.b.ins().iadd_imm_s(row, j as i64);
                    let v = e.load_v(y, i);
                    let q = e.b.ins().fdiv(v, d);
                    e.store_v(q, y, i);
                    j += 4;
                }
            }
            for c in j..ow {
                let d = e.cf(div(c));
                let i = e.b.ins().iadd_imm_s(row, c as i64);
                let v = e.load_f32(y, i);
                let q = e.b.ins().fdiv(v, d);
                e.store_f32(q, y, i);
            }
        });
        r = r1;
    }
}

/// Output rows per step of the padded-plane max pool: the window rows
/// two adjacent output rows share are reduced once
/// ([`super::direct::PadPlane::compute`] combines each padded row's
/// columns first).
fn pool_rows(stride: usize) -> usize {
    if stride == 1 {
        4
    } else {
        2
    }
}

/// This task's units `[lo, hi)` of `units` (all of them without a split).
fn plane_range(
    e: &mut Emit<'_>,
    units: usize,
    unit: &'static str,
    split: bool,
) -> Result<(Value, Value), String> {
    if split {
        e.task_range(units, unit)
    } else {
        Ok((e.ci(0), e.ci(units as i64)))
    }
}

/// End of the columns `[qlo, end)` an interior loop can do four at a time
/// with [`Emit::load_strided4`]: whole groups of 4 inside `[qlo, qhi)`
/// whose last tap's strided load (`reach` = `(k-1)*dil` past the window
/// start, stride `s`, pad `pad`) stays inside the row of width `w`, so
/// vector loads never leave the buffer. The rest stays scalar.
pub(crate) fn vec4_end(
    qlo: usize,
    qhi: usize,
    s: usize,
    pad: usize,
    reach: usize,
    w: usize,
) -> usize {
    let mut q = qlo;
    while q + 4 <= qhi {
        let last = (q * s + reach + super::emit::strided4_span(s)) as i64 - pad as i64;
        if last > w as i64 {
            break;
        }
        q += 4;
    }
    q
}

/// Output row `r`, columns `[q0, q1)` of one plane, with the valid taps of
/// each window computed at run time.
#[allow(clippy::too_many_arguments)]
fn pool_generic(
    e: &mut Emit<'_>,
    p: &Pool2d,
    (h, w, ow): (usize, usize, usize),
    x: Value,
    y: Value,
    xo: Value,
    yo: Value,
    r: Value,
    q0: Value,
    q1: Value,
    max: bool,
) {
    let (ilo, ihi, ihp) = tap_range(
        e,
        r,
        p.strides[0],
        p.pads[0],
        p.dilations[0],
        p.kernel[0],
        h,
        p.pads[2],
    );
    e.for_range(q0, q1, 1, |e, q| {
        let (jlo, jhi, jhp) = tap_range(
            e,
            q,
            p.strides[1],
            p.pads[1],
            p.dilations[1],
            p.kernel[1],
            w,
            p.pads[3],
        );
        let init = if max {
            e.cf(f32::NEG_INFINITY)
        } else {
            e.cf(0.0)
        };
        let acc = e.var(F32, init);
        let hs = e.b.ins().imul_imm_s(r, p.strides[0] as i64);
        let hs = e.b.ins().iadd_imm_s(hs, -(p.pads[0] as i64));
        let ws = e.b.ins().imul_imm_s(q, p.strides[1] as i64);
        let ws = e.b.ins().iadd_imm_s(ws, -(p.pads[1] as i64));
        e.for_range(ilo, ihi, 1, |e, i| {
            let ih = e.b.ins().imul_imm_s(i, p.dilations[0] as i64);
            let ih = e.b.ins().iadd(ih, hs);
            let row = e.b.ins().imul_imm_s(ih, w as i64);
            let row = e.b.ins().iadd(row, xo);
            e.for_range(jlo, jhi, 1, |e, j| {
                let iw = e.b.ins().imul_imm_s(j, p.dilations[1] as i64);
                let iw = e.b.ins().iadd(iw, ws);
                let idx = e.b.ins().iadd(row, iw);
                let v = e.load_f32(x, idx);
                let a = e.b.use_var(acc);
                let nv = if max {
                    nan_max(e, a, v)
                } else {
                    e.b.ins().fadd(a, v)
                };
                e.b.def_var(acc, nv);
            });
        });
        let a = e.b.use_var(acc);
        let out = if max {
            a
        } else {
            let (ch, cw) = if p.count_include_pad {
                (ihp, jhp)
            } else {
                let ch = e.b.ins().isub(ihi, ilo);
                let cw = e.b.ins().isub(jhi, jlo);
                (ch, cw)
            };
            let cnt = e.b.ins().imul(ch, cw);
            let cf = e.b.ins().fcvt_from_sint(F32, cnt);
            e.b.ins().fdiv(a, cf)
        };
        let oi = e.b.ins().imul_imm_s(r, ow as i64);
        let oi = e.b.ins().iadd(oi, yo);
        let oi = e.b.ins().iadd(oi, q);
        e.store_f32(out, y, oi);
    });
}

/// Reduces `x` of shape `xs` over `axes` (sorted) into the dense output.
/// Trailing reduced axes form one contiguous run summed in f32x4.
/// With `split`, each task computes the result elements of its units
/// (one unit per result element).
#[allow(clippy::too_many_arguments)]
fn reduce(
    e: &mut Emit<'_>,
    xs: &[usize],
    axes: &[usize],
    kind: ReduceKind,
    x: Value,
    y: Value,
    split: bool,
) -> Result<(), String> {
    if let Some(lanes) = vector_lanes(xs, axes, kind) {
        return reduce_lanes(e, xs, axes, kind, lanes, (x, y), split);
    }
    let xstr = contiguous(xs);
    let kept: Vec<usize> = (0..xs.len()).filter(|a| !axes.contains(a)).collect();
    let kept_dims: Vec<usize> = kept.iter().map(|&a| xs[a]).collect();
    let kept_str: Vec<i64> = kept.iter().map(|&a| xstr[a]).collect();
    let out_str = contiguous(&kept_dims);
    let count: usize = axes.iter().map(|&a| xs[a]).product();
    // Trailing contiguous block of reduced axes?
    let trailing = axes
        .iter()
        .rev()
        .enumerate()
        .all(|(i, &a)| a == xs.len() - 1 - i);
    let mut body = |e: &mut Emit<'_>, idx: &[Value]| {
        // The run's start pinned here (`Emit::pin`): computed once per
        // result element, not for every block of the run.
        let xo = e.linear(None, idx, &kept_str);
        let xo = e.pin(xo);
        let yo = e.linear(None, idx, &out_str);
        let r = if trailing {
            run_reduce(e, x, xo, count, kind)
        } else {
            let rdims: Vec<usize> = axes.iter().map(|&a| xs[a]).collect();
            let rstr: Vec<i64> = axes.iter().map(|&a| xstr[a]).collect();
            let init = if kind == ReduceKind::Max {
                e.cf(f32::NEG_INFINITY)
            } else {
                e.cf(0.0)
            };
            let acc = e.var(F32, init);
            e.for_nest(&rdims, &mut |e, ri| {
                let o = e.linear(Some(xo), ri, &rstr);
                let v = e.load_f32(x, o);
                let a = e.b.use_var(acc);
                let nv = if kind == ReduceKind::Max {
                    nan_max(e, a, v)
                } else {
                    e.b.ins().fadd(a, v)
                };
                e.b.def_var(acc, nv);
            });
            e.b.use_var(acc)
        };
        let r = if kind == ReduceKind::Mean {
            let inv = e.cf(1.0 / count.max(1) as f32);
            e.b.ins().fmul(r, inv)
        } else {
            r
        };
        e.store_f32(r, y, yo);
    };
    let outputs: usize = kept_dims.iter().product();
    if !split || outputs <= 1 {
        e.for_nest(&kept_dims, &mut body);
        return Ok(());
    }
    let (lo, hi) = e.task_range(outputs, "result elements")?;
    e.for_range(lo, hi, 1, |e, f| {
        // The kept indices of result element `f`.
        let idx: Vec<Value> = (0..kept_dims.len())
            .map(|d| {
                let q = e.b.ins().udiv_imm_u(f, out_str[d]);
                if d == 0 {
                    q
                } else {
                    e.b.ins().urem_imm_u(q, kept_dims[d] as i64)
                }
            })
            .collect();
        body(e, &idx);
    });
    Ok(())
}

/// Sum or max of `len` contiguous f32s at `x[off..]`: f32x4 accumulator,
/// scalar tail, lanes combined at the end.
fn run_reduce(e: &mut Emit<'_>, x: Value, off: Value, len: usize, kind: ReduceKind) -> Value {
    let max = kind == ReduceKind::Max;
    let init = if max { f32::NEG_INFINITY } else { 0.0 };
    let v_end = len / 4 * 4;
    let iv = e.vf(init);
    let combine = |e: &mut Emit<'_>, a: Value, v: Value| {
        if max {
            e.b.ins().fmax(a, v)
        } else {
            e.b.ins().fadd(a, v)
        }
    };
    // Four independent vector accumulators over blocks of 16, so the loop
    // is not one chain of dependent adds (4 cycles each: SqueezeNet's
    // 1000 x 169 GlobalAveragePool was latency-bound), then the rest into
    // the first; combined pairwise.
    let accs: Vec<Variable> = (0..4).map(|_| e.var(F32X4, iv)).collect();
    let b_end = if v_end >= 32 { v_end / 16 * 16 } else { 0 };
    if b_end > 0 {
        let s = e.ci(0);
        let en = e.ci(b_end as i64);
        e.for_range(s, en, 16, |e, j| {
            let i = e.b.ins().iadd(off, j);
            for (k, &acc) in accs.iter().enumerate() {
                let ik = e.b.ins().iadd_imm_s(i, 4 * k as i64);
                let v = e.load_v(x, ik);
                let a = e.b.use_var(acc);
                let nv = combine(e, a, v);
                e.b.def_var(acc, nv);
            }
        });
    }
    let vacc = accs[0];
    if v_end > b_end {
        let s = e.ci(b_end as i64);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| {
            let i = e.b.ins().iadd(off, j);
            let v = e.load_v(x, i);
            let a = e.b.use_var(vacc);
            let nv = combine(e, a, v);
            e.b.def_var(vacc, nv);
        });
    }
    if b_end > 0 {
        let [a0, a1, a2, a3] = [0, 1, 2, 3].map(|k| e.b.use_var(accs[k]));
        let l = combine(e, a0, a1);
        let r = combine(e, a2, a3);
        let t = combine(e, l, r);
        e.b.def_var(vacc, t);
    }
    let a = e.b.use_var(vacc);
    let mut r = e.b.ins().extractlane(a, 0);
    for l in 1..4u8 {
        let t = e.b.ins().extractlane(a, l);
        r = if max {
            nan_max(e, r, t)
        } else {
            e.b.ins().fadd(r, t)
        };
    }
    let sacc = e.var(F32, r);
    if v_end < len {
        let s = e.ci(v_end as i64);
        let en = e.ci(len as i64);
        e.for_range(s, en, 1, |e, j| {
            let i = e.b.ins().iadd(off, j);
            let v = e.load_f32(x, i);
            let a = e.b.use_var(sacc);
            let nv = if max {
                nan_max(e, a, v)
            } else {
                e.b.ins().fadd(a, v)
            };
            e.b.def_var(sacc, nv);
        });
    }
    e.b.use_var(sacc)
}

/// Softmax or LogSoftmax along `ax`: per lane, max, sum of `exp(x - max)`,
/// then the normalised values.
/// With `split`, each task computes the lanes of its units (one unit per
/// lane `(o, i)`, flat index `o * inner + i`).
fn softmax(
    e: &mut Emit<'_>,
    xs: &[usize],
    ax: usize,
    x: Value,
    y: Value,
    log: bool,
    split: bool,
) -> Result<(), String> {
    let outer: usize = xs[..ax].iter().product();
    let len = xs[ax];
    let inner: usize = xs[ax + 1..].iter().product();
    if inner == 1 && len >= 4 {
        return softmax_rows(e, (outer, len), x, y, log, split);
    }
    let (lo, hi) = plane_range(e, outer * inner, "rows along the axis", split)?;
    e.for_range(lo, hi, 1, |e, lane| {
        {
            let o = e.b.ins().udiv_imm_u(lane, inner as i64);
            let i = e.b.ins().urem_imm_u(lane, inner as i64);
            let base = e.b.ins().imul_imm_s(o, (len * inner) as i64);
            let base = e.b.ins().iadd(base, i);
            let at = |e: &mut Emit<'_>, j: Value| -> Value {
                let t = e.b.ins().imul_imm_s(j, inner as i64);
                e.b.ins().iadd(base, t)
            };
            let ninf = e.cf(f32::NEG_INFINITY);
            let m = e.var(F32, ninf);
            e.for_n(len, |e, j| {
                let k = at(e, j);
                let v = e.load_f32(x, k);
                let a = e.b.use_var(m);
                // f32::max semantics (NaN ignored), as the interpreter.
                let gt = e.b.ins().fcmp(FloatCC::GreaterThan, v, a);
                let an = e.b.ins().fcmp(FloatCC::Unordered, a, a);
                let c = e.b.ins().bor(gt, an);
                let nv = e.b.ins().select(c, v, a);
                e.b.def_var(m, nv);
            });
            let mx = e.b.use_var(m);
            let z = e.cf(0.0);
            let s = e.var(F32, z);
            e.for_n(len, |e, j| {
                let k = at(e, j);
                let v = e.load_f32(x, k);
                let d = e.b.ins().fsub(v, mx);
                let ex = scalar(e, d, math::exp);
                let a = e.b.use_var(s);
                let nv = e.b.ins().fadd(a, ex);
                e.b.def_var(s, nv);
            });
            let sum = e.b.use_var(s);
            let ls = scalar(e, sum, math::log);
            let one = e.cf(1.0);
            let inv = e.b.ins().fdiv(one, sum);
            e.for_n(len, |e, j| {
                let k = at(e, j);
                let v = e.load_f32(x, k);
                let d = e.b.ins().fsub(v, mx);
                let r = if log {
                    e.b.ins().fsub(d, ls)
                } else {
                    let ex = scalar(e, d, math::exp);
                    e.b.ins().fmul(ex, inv)
                };
                e.store_f32(r, y, k);
            });
        }
    });
    Ok(())
}

/// The four lanes of f32x4 `v` added in lane order: the partial sums of
/// [`softmax_rows`] and [`normalize_rows`].
fn lane_sum(e: &mut Emit<'_>, v: Value) -> Value {
    let mut sum = e.b.ins().extractlane(v, 0);
    for lane in 1..4u8 {
        let l = e.b.ins().extractlane(v, lane);
        sum = e.b.ins().fadd(sum, l);
    }
    sum
}

/// `max(a, v)` as the interpreter's softmax takes it (`f32::max`: a
/// NaN operand ignored), on scalars or lane-wise on f32x4s.
fn softmax_max(e: &mut Emit<'_>, a: Value, v: Value, lanes: bool) -> Value {
    let gt = e.b.ins().fcmp(FloatCC::GreaterThan, v, a);
    let an = e.b.ins().fcmp(FloatCC::Unordered, a, a);
    let c = e.b.ins().bor(gt, an);
    if lanes {
        e.msel(c, v, a)
    } else {
        e.b.ins().select(c, v, a)
    }
}

/// [`softmax`] along a contiguous last axis (`inner` = 1: attention
/// scores, classifier logits), four lanes at a time: the row's max, then
/// `exp(x - max)` stored (Softmax) and summed in four partial sums added
/// at the end, then the row scaled by `1 / sum` (or `x - max - log sum`
/// for LogSoftmax). Each element's exponential is the scalar loop's
/// (the same vector code), computed once instead of twice; the sum's
/// order differs. Element by element with a vector `exp` for each, the
/// attention softmax of ViT-B/16 (12 x 197 x 197) took 12 ms.
fn softmax_rows(
    e: &mut Emit<'_>,
    (outer, len): (usize, usize),
    x: Value,
    y: Value,
    log: bool,
    split: bool,
) -> Result<(), String> {
    let vecs = len / 4;
    let (lo, hi) = plane_range(e, outer, "rows along the axis", split)?;
    e.for_range(lo, hi, 1, |e, row| {
        let base = e.b.ins().imul_imm_s(row, len as i64);
        let at = |e: &mut Emit<'_>, j: Value| -> Value {
            let t = e.b.ins().imul_imm_s(j, 4);
            e.b.ins().iadd(base, t)
        };
        let tail = |e: &mut Emit<'_>, j: usize| -> Value { e.b.ins().iadd_imm_s(base, j as i64) };
        let ninf = e.vf(f32::NEG_INFINITY);
        let vm = e.var(F32X4, ninf);
        e.for_n(vecs, |e, j| {
            let k = at(e, j);
            let v = e.load_v(x, k);
            let a = e.b.use_var(vm);
            let nv = softmax_max(e, a, v, true);
            e.b.def_var(vm, nv);
        });
        let lanes = e.b.use_var(vm);
        let mut mx = e.cf(f32::NEG_INFINITY);
        for lane in 0..4u8 {
            let v = e.b.ins().extractlane(lanes, lane);
            mx = softmax_max(e, mx, v, false);
        }
        for j in vecs * 4..len {
            let k = tail(e, j);
            let v = e.load_f32(x, k);
            mx = softmax_max(e, mx, v, false);
        }
        let mxv = e.splat(mx);
        let (mx, mxv) = (e.pin(mx), e.pin(mxv));
        let zero = e.vf(0.0);
        let vs = e.var(F32X4, zero);
        e.for_n(vecs, |e, j| {
            let k = at(e, j);
            let v = e.load_v(x, k);
            let d = e.b.ins().fsub(v, mxv);
            let ex = math::exp(e, d);
            if !log {
                e.store_v(ex, y, k);
            }
            let a = e.b.use_var(vs);
            let nv = e.b.ins().fadd(a, ex);
            e.b.def_var(vs, nv);
        });
        let sums = e.b.use_var(vs);
        let mut sum = lane_sum(e, sums);
        for j in vecs * 4..len {
            let k = tail(e, j);
            let v = e.load_f32(x, k);
            let d = e.b.ins().fsub(v, mx);
            let ex = scalar(e, d, math::exp);
            if !log {
                e.store_f32(ex, y, k);
            }
            sum = e.b.ins().fadd(sum, ex);
        }
        if log {
            let ls = scalar(e, sum, math::log);
            let lsv = e.splat(ls);
            let (ls, lsv) = (e.pin(ls), e.pin(lsv));
            row_each(e, base, len, |e, k, _, lanes| {
                let v = e.load_lanes(lanes, x, k);
                let (m, l) = if lanes { (mxv, lsv) } else { (mx, ls) };
                let d = e.b.ins().fsub(v, m);
                let r = e.b.ins().fsub(d, l);
                e.store_lanes(lanes, r, y, k);
            });
        } else {
            let one = e.cf(1.0);
            let inv = e.b.ins().fdiv(one, sum);
            let invv = e.splat(inv);
            let (inv, invv) = (e.pin(inv), e.pin(invv));
            row_each(e, base, len, |e, k, _, lanes| {
                let v = e.load_lanes(lanes, y, k);
                let r = e.b.ins().fmul(v, if lanes { invv } else { inv });
                e.store_lanes(lanes, r, y, k);
            });
        }
    });
    Ok(())
}

/// Runs `body(e, index, offset, lanes)` over the `len` elements of a row
/// from `base`: four lanes at a time (`lanes`, `index` = `base + offset`
/// the first lane's element), then each of the last `len % 4` alone;
/// the per-element steps of the row kernels, written once for both
/// widths ([`Emit::load_lanes`], [`Emit::store_lanes`]).
fn row_each(
    e: &mut Emit<'_>,
    base: Value,
    len: usize,
    mut body: impl FnMut(&mut Emit<'_>, Value, Value, bool),
) {
    e.for_n(len / 4, |e, j| {
        let off = e.b.ins().imul_imm_s(j, 4);
        let k = e.b.ins().iadd(base, off);
        body(e, k, off, true);
    });
    for j in len / 4 * 4..len {
        let k = e.b.ins().iadd_imm_s(base, j as i64);
        let off = e.ci(j as i64);
        body(e, k, off, false);
    }
}

/// The mean of the `l` elements of `x` from `base` (summed as
/// [`run_reduce`] sums), and `1 / l`: the first step of [`normalize`]
/// and [`normalize_rows`].
fn row_mean(e: &mut Emit<'_>, x: Value, base: Value, l: usize) -> (Value, Value) {
    let sum = run_reduce(e, x, base, l, ReduceKind::Sum);
    let inv_n = e.cf(1.0 / l.max(1) as f32);
    (e.b.ins().fmul(sum, inv_n), inv_n)
}

/// `1 / sqrt(ss / l + eps)` from a row's summed squared deviations `ss`
/// and `inv_n = 1 / l`.
fn row_rstd(e: &mut Emit<'_>, ss: Value, inv_n: Value, eps: f32) -> Value {
    let var = e.b.ins().fmul(ss, inv_n);
    let ep = e.cf(eps);
    let ve = e.b.ins().fadd(var, ep);
    let sd = e.b.ins().sqrt(ve);
    let one = e.cf(1.0);
    e.b.ins().fdiv(one, sd)
}

/// [`normalize`] of rows `lo..hi` of `l` contiguous elements with a
/// scale and bias of `l` elements each (LayerNormalization over the last
/// axis, a transformer's), four lanes at a time: the mean as
/// [`run_reduce`] sums it, the squared deviations in one vector sum (its
/// lanes then added in order) plus the scalar tail, then each element
/// `(x - mean) * rstd * scale + bias` as the scalar loop computes it.
/// Element by element, decomposing each index to find its scale,
/// ConvNeXt-T's 23 LayerNorms took 13.6 ms at one thread and at two.
fn normalize_rows(
    e: &mut Emit<'_>,
    (lo, hi): (Value, Value),
    l: usize,
    (x, y): (Value, Value),
    eps: f32,
    (sc, bias): (Value, Option<Value>),
) {
    let vecs = l / 4;
    e.for_range(lo, hi, 1, |e, o| {
        let base = e.b.ins().imul_imm_s(o, l as i64);
        let (mean, inv_n) = row_mean(e, x, base, l);
        let meanv = e.splat(mean);
        let (mean, meanv) = (e.pin(mean), e.pin(meanv));
        let zero = e.vf(0.0);
        let acc = e.var(F32X4, zero);
        e.for_n(vecs, |e, j| {
            let jj = e.b.ins().imul_imm_s(j, 4);
            let i = e.b.ins().iadd(base, jj);
            let v = e.load_v(x, i);
            let d = e.b.ins().fsub(v, meanv);
            let sq = e.b.ins().fmul(d, d);
            let a = e.b.use_var(acc);
            let nv = e.b.ins().fadd(a, sq);
            e.b.def_var(acc, nv);
        });
        let sums = e.b.use_var(acc);
        let mut ss = lane_sum(e, sums);
        for j in vecs * 4..l {
            let i = e.b.ins().iadd_imm_s(base, j as i64);
            let v = e.load_f32(x, i);
            let d = e.b.ins().fsub(v, mean);
            let sq = e.b.ins().fmul(d, d);
            ss = e.b.ins().fadd(ss, sq);
        }
        let rstd = row_rstd(e, ss, inv_n, eps);
        let rstdv = e.splat(rstd);
        let (rstd, rstdv) = (e.pin(rstd), e.pin(rstdv));
        row_each(e, base, l, |e, i, jj, lanes| {
            let v = e.load_lanes(lanes, x, i);
            let (m, rs) = if lanes { (meanv, rstdv) } else { (mean, rstd) };
            let d = e.b.ins().fsub(v, m);
            let nrm = e.b.ins().fmul(d, rs);
            let s = e.load_lanes(lanes, sc, jj);
            let b = match bias {
                Some(bp) => e.load_lanes(lanes, bp, jj),
                None if lanes => e.vf(0.0),
                None => e.cf(0.0),
            };
            let t = e.b.ins().fmul(nrm, s);
            let r = e.b.ins().fadd(t, b);
            e.store_lanes(lanes, r, y, i);
        });
    });
}

/// LRN across channels: `x / (bias + alpha/size * sum_sq)^beta`.
fn lrn(e: &mut Emit<'_>, p: &Lrn, xs: &[usize], x: Value, y: Value) -> Result<(), String> {
    let &[n, c, h, w] = xs else {
        return Err("LRN needs a rank-4 input".into());
    };
    let hw = h * w;
    let before = (p.size.saturating_sub(1) / 2) as i64;
    let after = (p.size.saturating_sub(1)).div_ceil(2) as i64;
    e.for_n(n, |e, ni| {
        e.for_n(c, |e, ci| {
            let lo = e.b.ins().iadd_imm_s(ci, -before);
            let z = e.ci(0);
            let lo = e.b.ins().smax(lo, z);
            let hi = e.b.ins().iadd_imm_s(ci, after + 1);
            let cc = e.ci(c as i64);
            let hi = e.b.ins().smin(hi, cc);
            let plane0 = e.b.ins().imul_imm_s(ni, (c * hw) as i64);
            e.for_n(hw, |e, s| {
                let zf = e.cf(0.0);
                let acc = e.var(F32, zf);
                e.for_range(lo, hi, 1, |e, k| {
                    let o = e.b.ins().imul_imm_s(k, hw as i64);
                    let o = e.b.ins().iadd(o, plane0);
                    let o = e.b.ins().iadd(o, s);
                    let v = e.load_f32(x, o);
                    let sq = e.b.ins().fmul(v, v);
                    let a = e.b.use_var(acc);
                    let nv = e.b.ins().fadd(a, sq);
                    e.b.def_var(acc, nv);
                });
                let sum = e.b.use_var(acc);
                let k = e.cf(p.alpha / p.size as f32);
                let t = e.b.ins().fmul(sum, k);
                let bias = e.cf(p.bias);
                let base = e.b.ins().fadd(t, bias);
                let bv = e.splat(base);
                let lg = math::log(e, bv);
                let be = e.vf(-p.beta);
                let t = e.b.ins().fmul(lg, be);
                let pw = math::exp(e, t);
                let pw = e.lane0(pw);
                let o = e.b.ins().imul_imm_s(ci, hw as i64);
                let o = e.b.ins().iadd(o, plane0);
                let o = e.b.ins().iadd(o, s);
                let v = e.load_f32(x, o);
                let r = e.b.ins().fmul(v, pw);
                e.store_f32(r, y, o);
            });
        });
    });
    Ok(())
}

/// Normalises `lanes` contiguous lanes of length `l`: mean and variance
/// (two passes), then `(x - mean) / sqrt(var + eps) * scale + bias` with
/// `affine(lane, j)` giving scale and bias.
#[allow(clippy::too_many_arguments)]
fn normalize(
    e: &mut Emit<'_>,
    (lo, hi): (Value, Value),
    l: usize,
    x: Value,
    y: Value,
    eps: f32,
    mut affine: impl FnMut(&mut Emit<'_>, Value, Value) -> (Value, Value),
) {
    e.for_range(lo, hi, 1, |e, o| {
        let base = e.b.ins().imul_imm_s(o, l as i64);
        let (mean, inv_n) = row_mean(e, x, base, l);
        let z = e.cf(0.0);
        let acc = e.var(F32, z);
        e.for_n(l, |e, j| {
            let i = e.b.ins().iadd(base, j);
            let v = e.load_f32(x, i);
            let d = e.b.ins().fsub(v, mean);
            let sq = e.b.ins().fmul(d, d);
            let a = e.b.use_var(acc);
            let nv = e.b.ins().fadd(a, sq);
            e.b.def_var(acc, nv);
        });
        let ss = e.b.use_var(acc);
        let rstd = row_rstd(e, ss, inv_n, eps);
        e.for_n(l, |e, j| {
            let i = e.b.ins().iadd(base, j);
            let v = e.load_f32(x, i);
            let d = e.b.ins().fsub(v, mean);
            let nrm = e.b.ins().fmul(d, rstd);
            let (s, b) = affine(e, o, j);
            let t = e.b.ins().fmul(nrm, s);
            let r = e.b.ins().fadd(t, b);
            e.store_f32(r, y, i);
        });
    });
}
