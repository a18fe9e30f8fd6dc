//! Data movement as generated strided copies: every op here is a loop nest
//! `dst[off_d + sum i*sd] = src[off_s + sum i*ss]` with static strides
//! (Transpose permutes them, Slice scales them by the step, Expand zeroes
//! broadcast ones, Concat/Split offset them), contiguous inner runs copied
//! with memcpy or f32x4, plus fills (Pad, ConstantOfShape, Range) and
//! Gather's run-time indices.

use super::elementwise::{bcast_strides, contiguous};
use super::emit::Emit;
use super::KCtx;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, I32, I64, I8};
use cranelift_codegen::ir::{InstBuilder, Type, Value};
use dnnc_ir::infer::{norm_axis, slice_range};
use dnnc_ir::op::{PadMode, RangeParams, Scalar};
use dnnc_ir::{DType, Op};

/// Whether the CPU backend lowers `op` as data movement.
pub(crate) fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::Concat { .. }
            | Op::Split { .. }
            | Op::Slice { .. }
            | Op::Transpose { .. }
            | Op::Pad { .. }
            | Op::Gather { .. }
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::ConstantOfShape { .. }
            | Op::Range(_)
            | Op::Shape { .. }
    )
}

/// The integer type moving one element of `dt` bit-exactly.
fn elem_ty(dt: DType) -> Type {
    match dt {
        DType::F32 => I32,
        DType::I64 => I64,
        DType::Bool => I8,
    }
}

/// Merges axes contiguous in both src and dst; drops length-1 axes.
fn coalesce2(dims: &[usize], a: &[i64], b: &[i64]) -> (Vec<usize>, Vec<i64>, Vec<i64>) {
    let (mut d, mut sa, mut sb) = (Vec::new(), Vec::<i64>::new(), Vec::<i64>::new());
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        if let (Some(&la), Some(&lb)) = (sa.last(), sb.last()) {
            if la == a[i] * dims[i] as i64 && lb == b[i] * dims[i] as i64 {
                let k = d.len() - 1;
                d[k] *= dims[i];
                sa[k] = a[i];
                sb[k] = b[i];
                continue;
            }
        }
        d.push(dims[i]);
        sa.push(a[i]);
        sb.push(b[i]);
    }
    if d.is_empty() {
        d.push(1);
        sa.push(1);
        sb.push(1);
    }
    (d, sa, sb)
}

/// `dst[dst_off + i.dst_str] = src[src_off + i.src_str]` over `dims`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided_copy(
    e: &mut Emit<'_>,
    dims: &[usize],
    dst: Value,
    dst_off: i64,
    dst_str: &[i64],
    src: Value,
    src_off: i64,
    src_str: &[i64],
    dt: DType,
) {
    let (db, sb) = (e.ci(dst_off), e.ci(src_off));
    strided_copy_at(e, dims, (dst, db, dst_str), (src, sb, src_str), dt);
}

/// [`strided_copy`] with run-time element offsets: `(buffer, offset,
/// strides)` of the destination and of the source.
fn strided_copy_at(
    e: &mut Emit<'_>,
    dims: &[usize],
    (dst, db, dst_str): (Value, Value, &[i64]),
    (src, sb, src_str): (Value, Value, &[i64]),
    dt: DType,
) {
    if dims.contains(&0) {
        return;
    }
    let (d, sd, ss) = coalesce2(dims, dst_str, src_str);
    copy_nest(e, &d, &sd, &ss, (dst, db), (src, sb), dt);
}

/// Elements per task unit of a copy that coalesces to one run.
const COPY_CHUNK: usize = 4096;

/// [`strided_copy`] shared out as tasks (the kernel ABI's split): over
/// the outermost loop of the coalesced copy, or over [`COPY_CHUNK`]
/// element chunks when it coalesces to one run. For the kernels that are
/// one copy (Transpose, Slice, Expand, a Split copying one piece); the
/// runtime picks the task count by the copy's work.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided_copy_tasks(
    e: &mut Emit<'_>,
    dims: &[usize],
    dst: Value,
    dst_off: i64,
    dst_str: &[i64],
    src: Value,
    src_off: i64,
    src_str: &[i64],
    dt: DType,
) -> Result<(), String> {
    if dims.contains(&0) {
        return Ok(());
    }
    let (d, sd, ss) = coalesce2(dims, dst_str, src_str);
    if let Some(tr) = Transpose2::of(&d, &sd, &ss, dt) {
        return tr.emit(e, (dst, dst_off), (src, src_off));
    }
    if d.len() == 1 {
        let n = d[0];
        let chunks = n.div_ceil(COPY_CHUNK);
        if chunks < 2 {
            strided_copy(e, dims, dst, dst_off, dst_str, src, src_off, src_str, dt);
            return Ok(());
        }
        let (lo, hi) = e.task_range(chunks, "4096-element chunks of the copy")?;
        let end = e.ci(n as i64);
        e.for_range(lo, hi, 1, |e, c| {
            let start = e.b.ins().imul_imm_s(c, COPY_CHUNK as i64);
            let stop = e.b.ins().iadd_imm_s(start, COPY_CHUNK as i64);
            let stop = e.b.ins().smin(stop, end);
            if sd[0] == 1 && ss[0] == 1 {
                let esz = dt.size_bytes();
                let od = e.b.ins().iadd_imm_s(start, dst_off);
                let os = e.b.ins().iadd_imm_s(start, src_off);
                let pd = e.addr(dst, od, esz);
                let ps = e.addr(src, os, esz);
                let len = e.b.ins().isub(stop, start);
                let n = e.b.ins().imul_imm_s(len, esz as i64);
                let tc = e.cfg;
                e.b.call_memcpy(tc, pd, ps, n);
                return;
            }
            e.for_range(start, stop, 1, |e, j| {
                let td = e.b.ins().imul_imm_s(j, sd[0]);
                let td = e.b.ins().iadd_imm_s(td, dst_off);
                let ts = e.b.ins().imul_imm_s(j, ss[0]);
                let ts = e.b.ins().iadd_imm_s(ts, src_off);
                let ty = elem_ty(dt);
                let v = e.load_ty(ty, src, ts);
                e.store_ty(v, dst, td);
            });
        });
        return Ok(());
    }
    let (lo, hi) = e.task_range(d[0], "outer rows of the copy")?;
    e.for_range(lo, hi, 1, |e, i| {
        let db = e.b.ins().imul_imm_s(i, sd[0]);
        let db = e.b.ins().iadd_imm_s(db, dst_off);
        let sb = e.b.ins().imul_imm_s(i, ss[0]);
        let sb = e.b.ins().iadd_imm_s(sb, src_off);
        copy_nest(e, &d[1..], &sd[1..], &ss[1..], (dst, db), (src, sb), dt);
    });
    Ok(())
}

/// A coalesced f32 copy whose last two axes are a 2-D transpose: the
/// source contiguous along the second-last axis, the destination along
/// the last (the reorders into and out of the channel-blocked layout,
/// `[C/8][8][HW] <-> [C/8][HW][8]`, and any Transpose that swaps two
/// axes with contiguous runs). Copied in 4 x 4 tiles transposed in
/// registers, 16 elements by four vector loads, eight shuffles and four
/// vector stores, instead of one scalar load and store each (the
/// MobileNet-V2 stem's 32 x 112 x 112 reorder: 0.6 ms element by element).
struct Transpose2 {
    /// Outer axes (any strides), then rows `i` and columns `j`.
    d: Vec<usize>,
    sd: Vec<i64>,
    ss: Vec<i64>,
}

impl Transpose2 {
    fn of(d: &[usize], sd: &[i64], ss: &[i64], dt: DType) -> Option<Transpose2> {
        let r = d.len();
        let fits = dt == DType::F32
            && r >= 2
            && sd[r - 1] == 1
            && ss[r - 2] == 1
            && d[r - 2] >= 4
            && d[r - 1] >= 4;
        fits.then(|| Transpose2 {
            d: d.to_vec(),
            sd: sd.to_vec(),
            ss: ss.to_vec(),
        })
    }

    /// Splits over the outermost axis (one task when there is none).
    fn emit(&self, e: &mut Emit<'_>, dst: (Value, i64), src: (Value, i64)) -> Result<(), String> {
        let r = self.d.len();
        let (lo, hi) = if r > 2 {
            e.task_range(self.d[0], "outer rows of the transpose")?
        } else {
            (e.ci(0), e.ci(1))
        };
        let (dst, dst_off) = dst;
        let (src, src_off) = src;
        e.for_range(lo, hi, 1, |e, o| {
            let (db, sb) = if r > 2 {
                let db = e.b.ins().imul_imm_s(o, self.sd[0]);
                let sb = e.b.ins().imul_imm_s(o, self.ss[0]);
                (
                    e.b.ins().iadd_imm_s(db, dst_off),
                    e.b.ins().iadd_imm_s(sb, src_off),
                )
            } else {
                (e.ci(dst_off), e.ci(src_off))
            };
            let mid = if r > 3 { &self.d[1..r - 2] } else { &[][..] };
            let (msd, mss) = if r > 3 {
                (&self.sd[1..r - 2], &self.ss[1..r - 2])
            } else {
                (&[][..], &[][..])
            };
            e.for_nest(mid, &mut |e, idx| {
                let db = e.linear(Some(db), idx, msd);
                let sb = e.linear(Some(sb), idx, mss);
                self.plane(e, (dst, db), (src, sb));
            });
        });
        Ok(())
    }

    /// One `rows x cols` plane: whole 4 x 4 tiles, then the leftover
    /// rows and columns element by element.
    fn plane(&self, e: &mut Emit<'_>, (dst, db): (Value, Value), (src, sb): (Value, Value)) {
        let r = self.d.len();
        let (rows, cols) = (self.d[r - 2], self.d[r - 1]);
        let (ds, sc) = (self.sd[r - 2], self.ss[r - 1]);
        let (r4, c4) = (rows / 4 * 4, cols / 4 * 4);
        let (z, re, ce) = (e.ci(0), e.ci(r4 as i64), e.ci(c4 as i64));
        e.for_range(z, re, 4, |e, i| {
            e.for_range(z, ce, 4, |e, j| {
                // Source rows j..j+4 (each 4 consecutive i), transposed
                // into destination rows i..i+4 (each 4 consecutive j).
                let s0 = e.b.ins().imul_imm_s(j, sc);
                let s0 = e.b.ins().iadd(s0, i);
                let s0 = e.b.ins().iadd(s0, sb);
                let mut v = Vec::with_capacity(4);
                for q in 0..4 {
                    let idx = e.b.ins().iadd_imm_s(s0, q * sc);
                    v.push(e.load_v(src, idx));
                }
                let t0 = e.shuffle4(v[0], v[1], [0, 4, 1, 5]);
                let t1 = e.shuffle4(v[0], v[1], [2, 6, 3, 7]);
                let t2 = e.shuffle4(v[2], v[3], [0, 4, 1, 5]);
                let t3 = e.shuffle4(v[2], v[3], [2, 6, 3, 7]);
                let w = [
                    e.shuffle4(t0, t2, [0, 1, 4, 5]),
                    e.shuffle4(t0, t2, [2, 3, 6, 7]),
                    e.shuffle4(t1, t3, [0, 1, 4, 5]),
                    e.shuffle4(t1, t3, [2, 3, 6, 7]),
                ];
                let d0 = e.b.ins().imul_imm_s(i, ds);
                let d0 = e.b.ins().iadd(d0, j);
                let d0 = e.b.ins().iadd(d0, db);
                for (p, &wv) in w.iter().enumerate() {
                    let idx = e.b.ins().iadd_imm_s(d0, p as i64 * ds);
                    e.store_v(wv, dst, idx);
                }
            });
        });
        // Leftovers: columns c4.. of every row, rows r4.. of the tiled
        // columns.
        let one = |e: &mut Emit<'_>, i: Value, j: Value| {
            let s = e.b.ins().imul_imm_s(j, sc);
            let s = e.b.ins().iadd(s, i);
            let s = e.b.ins().iadd(s, sb);
            let d = e.b.ins().imul_imm_s(i, ds);
            let d = e.b.ins().iadd(d, j);
            let d = e.b.ins().iadd(d, db);
            let v = e.load_f32(src, s);
            e.store_f32(v, dst, d);
        };
        if c4 < cols {
            let (ce2, rend) = (e.ci(cols as i64), e.ci(rows as i64));
            e.for_range(z, rend, 1, |e, i| {
                e.for_range(ce, ce2, 1, |e, j| one(e, i, j));
            });
        }
        if r4 < rows {
            let rend = e.ci(rows as i64);
            e.for_range(re, rend, 1, |e, i| {
                e.for_range(z, ce, 1, |e, j| one(e, i, j));
            });
        }
    }
}

/// The loops of a coalesced copy `d` (innermost last) from `src` at
/// element offset `sb` to `dst` at `db`: whole contiguous runs of 64
/// bytes or more by `memcpy`, the rest element by element.
fn copy_nest(
    e: &mut Emit<'_>,
    d: &[usize],
    sd: &[i64],
    ss: &[i64],
    (dst, db): (Value, Value),
    (src, sb): (Value, Value),
    dt: DType,
) {
    let r = d.len();
    let inner = d[r - 1];
    let esz = dt.size_bytes();
    let ty = elem_ty(dt);
    let contiguous_run = sd[r - 1] == 1 && ss[r - 1] == 1;
    e.for_nest(&d[..r - 1], &mut |e, idx| {
        let od = e.linear(Some(db), idx, &sd[..r - 1]);
        let os = e.linear(Some(sb), idx, &ss[..r - 1]);
        if contiguous_run && inner * esz >= 64 {
            let pd = e.addr(dst, od, esz);
            let ps = e.addr(src, os, esz);
            let n = e.ci((inner * esz) as i64);
            let tc = e.cfg;
            e.b.call_memcpy(tc, pd, ps, n);
        } else {
            e.for_n(inner, |e, j| {
                let td = e.b.ins().imul_imm_s(j, sd[r - 1]);
                let td = e.b.ins().iadd(od, td);
                let ts = e.b.ins().imul_imm_s(j, ss[r - 1]);
                let ts = e.b.ins().iadd(os, ts);
                let v = e.load_ty(ty, src, ts);
                e.store_ty(v, dst, td);
            });
        }
    });
}

/// Bit pattern of `v` (given as f32, converted like the interpreter) in `dt`.
fn fill_value(e: &mut Emit<'_>, dt: DType, v: f32) -> Value {
    match dt {
        DType::F32 => e.b.ins().iconst(I32, v.to_bits() as i32 as i64),
        DType::I64 => e.b.ins().iconst(I64, v as i64),
        DType::Bool => e.b.ins().iconst(I8, (v != 0.0) as i64),
    }
}

/// Writes `val` (of the element's integer type) to `n` elements.
fn fill(e: &mut Emit<'_>, dst: Value, n: usize, val: Value) {
    e.for_n(n, |e, i| e.store_ty(val, dst, i));
}

/// Lowers a one-node data-movement kernel; returns its error messages.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    let n = c.anchor();
    let node = c.g.node(n);
    let out_ty = c.g.value(node.outputs[0]).ty.clone();
    let dt = out_ty.dtype;
    let ys = out_ty.shape.clone();
    // A Split's first result may be a view with no argument (its own
    // arm finds each result's buffer).
    let y = match c.arg(node.outputs[0]) {
        Ok(a) => e.bufs[a],
        Err(_) if matches!(node.op, Op::Split { .. }) => e.bufs[c.arg(node.inputs[0])?],
        Err(m) => return Err(m),
    };
    let bufs = e.bufs.clone();
    let xin = |i: usize| -> Result<(Value, Vec<usize>), String> {
        let v = *node.inputs.get(i).ok_or("missing operand")?;
        Ok((bufs[c.arg(v)?], c.g.value(v).ty.shape.clone()))
    };
    let mut errors = Vec::new();
    match &node.op {
        Op::Transpose { perm } => {
            let (x, xs) = xin(0)?;
            let xst = contiguous(&xs);
            let src: Vec<i64> = perm.iter().map(|&p| xst[p]).collect();
            strided_copy_tasks(e, &ys, y, 0, &contiguous(&ys), x, 0, &src, dt)?;
        }
        Op::Slice {
            starts,
            ends,
            axes,
            steps,
        } => {
            let (x, xs) = xin(0)?;
            let xst = contiguous(&xs);
            let mut src = xst.clone();
            let mut off = 0i64;
            for (i, &a) in axes.iter().enumerate() {
                let ax = norm_axis(a, xs.len())?;
                let step = steps.get(i).copied().unwrap_or(1);
                let (s, st, _) = slice_range(xs[ax], starts[i], ends[i], step);
                off += s * xst[ax];
                src[ax] = st * xst[ax];
            }
            strided_copy_tasks(e, &ys, y, 0, &contiguous(&ys), x, off, &src, dt)?;
        }
        Op::Expand { .. } => {
            let (x, xs) = xin(0)?;
            let src = bcast_strides(&xs, &ys).ok_or("input does not broadcast")?;
            strided_copy_tasks(e, &ys, y, 0, &contiguous(&ys), x, 0, &src, dt)?;
        }
        Op::Concat { axis } if norm_axis(*axis, ys.len())? >= 1 && ys[0] >= 2 => {
            // Shared out over the leading axis (a batch's images): each
            // task copies every part of its slices. One task copying a
            // batch-8 DenseNet's concatenations ran at a third of the
            // bandwidth two cores reach (22.3 ms of them at two threads,
            // onnxruntime's 15.4).
            let ax = norm_axis(*axis, ys.len())?;
            let yst = contiguous(&ys);
            let parts = (0..node.inputs.len())
                .map(xin)
                .collect::<Result<Vec<_>, _>>()?;
            let (lo, hi) = e.task_range(ys[0], "slices of the leading axis")?;
            e.for_range(lo, hi, 1, |e, o| {
                let mut at = 0usize;
                for (x, xs) in &parts {
                    let xst = contiguous(xs);
                    let d = e.b.ins().imul_imm_s(o, yst[0]);
                    let d = e.b.ins().iadd_imm_s(d, at as i64 * yst[ax]);
                    let s0 = e.b.ins().imul_imm_s(o, xst[0]);
                    strided_copy_at(e, &xs[1..], (y, d, &yst[1..]), (*x, s0, &xst[1..]), dt);
                    at += xs[ax];
                }
            });
        }
        Op::Concat { axis } => {
            let ax = norm_axis(*axis, ys.len())?;
            let yst = contiguous(&ys);
            let mut at = 0usize;
            for i in 0..node.inputs.len() {
                let (x, xs) = xin(i)?;
                strided_copy(
                    e,
                    &xs,
                    y,
                    at as i64 * yst[ax],
                    &yst,
                    x,
                    0,
                    &contiguous(&xs),
                    dt,
                );
                at += xs[ax];
            }
        }
        Op::Split { axis, .. } => {
            let (x, xs) = xin(0)?;
            let ax = norm_axis(*axis, xs.len())?;
            let xst = contiguous(&xs);
            let mut at = 0usize;
            // One piece to copy (the others view the operand): its copy
            // is the kernel, shared out as tasks.
            let copied = node
                .outputs
                .iter()
                .filter(|v| c.arg_of.contains_key(v))
                .count();
            for &v in &node.outputs {
                let os = c.g.value(v).ty.shape.clone();
                // A result without a buffer argument views the operand
                // (the code generator's in-place Split): nothing to copy.
                if !c.arg_of.contains_key(&v) {
                    at += os[ax];
                    continue;
                }
                let yo = e.bufs[c.arg(v)?];
                let args = (yo, &contiguous(&os), at as i64 * xst[ax]);
                if copied == 1 {
                    strided_copy_tasks(e, &os, args.0, 0, args.1, x, args.2, &xst, dt)?;
                } else {
                    strided_copy(e, &os, args.0, 0, args.1, x, args.2, &xst, dt);
                }
                at += os[ax];
            }
        }
        Op::Tile { repeats } => {
            let (x, xs) = xin(0)?;
            let yst = contiguous(&ys);
            let xst = contiguous(&xs);
            let (mut dims, mut sd, mut ss) = (Vec::new(), Vec::new(), Vec::new());
            for a in 0..xs.len() {
                dims.extend([repeats[a], xs[a]]);
                sd.extend([xs[a] as i64 * yst[a], yst[a]]);
                ss.extend([0, xst[a]]);
            }
            strided_copy(e, &dims, y, 0, &sd, x, 0, &ss, dt);
        }
        Op::ConstantOfShape { value, .. } => {
            let v = match *value {
                Scalar::F32(f) => e.b.ins().iconst(I32, f.to_bits() as i32 as i64),
                Scalar::I64(i) => e.b.ins().iconst(I64, i),
                Scalar::Bool(b) => e.b.ins().iconst(I8, b as i64),
            };
            fill(e, y, out_ty.numel(), v);
        }
        Op::Range(r) => {
            let len = out_ty.numel();
            match *r {
                RangeParams::F32 { start, delta, .. } => e.for_n(len, |e, i| {
                    let fi = e.b.ins().fcvt_from_sint(F32, i);
                    let d = e.cf(delta);
                    let t = e.b.ins().fmul(fi, d);
                    let s = e.cf(start);
                    let v = e.b.ins().fadd(s, t);
                    e.store_f32(v, y, i);
                }),
                RangeParams::I64 { start, delta, .. } => e.for_n(len, |e, i| {
                    let t = e.b.ins().imul_imm_s(i, delta);
                    let v = e.b.ins().iadd_imm_s(t, start);
                    e.store_ty(v, y, i);
                }),
            }
        }
        Op::Pad { pads, mode, value } => {
            let (x, xs) = xin(0)?;
            pad(e, &xs, &ys, x, y, pads, *mode, *value, dt)?;
        }
        Op::Gather { axis } => {
            let (x, xs) = xin(0)?;
            let (ind, is) = xin(1)?;
            let ax = norm_axis(*axis, xs.len())?;
            let outer: usize = xs[..ax].iter().product();
            let d = xs[ax];
            let inner: usize = xs[ax + 1..].iter().product();
            let cnt: usize = is.iter().product();
            errors.push(format!("index out of range for axis {ax} of size {d}"));
            let esz = dt.size_bytes();
            let ty = elem_ty(dt);
            e.for_n(cnt, |e, j| {
                let k = e.load_ty(I64, ind, j);
                let neg = e.b.ins().icmp_imm_s(IntCC::SignedLessThan, k, 0);
                let kd = e.b.ins().iadd_imm_s(k, d as i64);
                let k = e.b.ins().select(neg, kd, k);
                let lo = e.b.ins().icmp_imm_s(IntCC::SignedLessThan, k, 0);
                let hi =
                    e.b.ins()
                        .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, k, d as i64);
                let bad = e.b.ins().bor(lo, hi);
                e.fail_if(bad, 1);
                e.for_n(outer, |e, o| {
                    let s = e.b.ins().imul_imm_s(o, d as i64);
                    let s = e.b.ins().iadd(s, k);
                    let s = e.b.ins().imul_imm_s(s, inner as i64);
                    let t = e.b.ins().imul_imm_s(o, cnt as i64);
                    let t = e.b.ins().iadd(t, j);
                    let t = e.b.ins().imul_imm_s(t, inner as i64);
                    if inner * esz >= 64 {
                        let pd = e.addr(y, t, esz);
                        let ps = e.addr(x, s, esz);
                        let nb = e.ci((inner * esz) as i64);
                        let tc = e.cfg;
                        e.b.call_memcpy(tc, pd, ps, nb);
                    } else {
                        e.for_n(inner, |e, q| {
                            let si = e.b.ins().iadd(s, q);
                            let ti = e.b.ins().iadd(t, q);
                            let v = e.load_ty(ty, x, si);
                            e.store_ty(v, y, ti);
                        });
                    }
                });
            });
        }
        other => return Err(format!("{} is not data movement", other.name())),
    }
    Ok(errors)
}

/// ONNX Pad in every mode: each output coordinate maps per axis to an input
/// coordinate (or to the fill value), computed with integer arithmetic.
#[allow(clippy::too_many_arguments)]
fn pad(
    e: &mut Emit<'_>,
    xs: &[usize],
    ys: &[usize],
    x: Value,
    y: Value,
    pads: &[i64],
    mode: PadMode,
    value: f32,
    dt: DType,
) -> Result<(), String> {
    let r = xs.len();
    if pads.len() != 2 * r {
        return Err("pads must have two entries per axis".into());
    }
    let ty = elem_ty(dt);
    let xst = contiguous(xs);
    let yst = contiguous(ys);
    if mode == PadMode::Constant {
        let v = fill_value(e, dt, value);
        fill(e, y, ys.iter().product(), v);
        // Interior: src start max(0, -b), dst start max(0, b).
        let mut dims = Vec::with_capacity(r);
        let (mut so, mut dof) = (0i64, 0i64);
        for a in 0..r {
            let (b, en) = (pads[a], pads[a + r]);
            let len = xs[a] as i64 - (-b).max(0) - (-en).max(0);
            if len <= 0 {
                return Ok(());
            }
            dims.push(len as usize);
            so += (-b).max(0) * xst[a];
            dof += b.max(0) * yst[a];
        }
        strided_copy(e, &dims, y, dof, &yst, x, so, &xst, dt);
        return Ok(());
    }
    e.for_nest(ys, &mut |e, idx| {
        let mut src = e.ci(0);
        for a in 0..r {
            let di = xs[a] as i64;
            let j = e.b.ins().iadd_imm_s(idx[a], -pads[a]);
            let j = match mode {
                PadMode::Edge => {
                    let z = e.ci(0);
                    let hi = e.ci(di - 1);
                    let t = e.b.ins().smax(j, z);
                    e.b.ins().smin(t, hi)
                }
                _ => {
                    // Reflect: m = j mod 2(d-1) (Euclidean); m >= d -> period - m.
                    let period = (2 * (di - 1)).max(1);
                    let p = e.ci(period);
                    let m = e.b.ins().srem(j, p);
                    let neg = e.b.ins().icmp_imm_s(IntCC::SignedLessThan, m, 0);
                    let mp = e.b.ins().iadd(m, p);
                    let m = e.b.ins().select(neg, mp, m);
                    let big = e.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, m, di);
                    let rm = e.b.ins().isub(p, m);
                    e.b.ins().select(big, rm, m)
                }
            };
            let t = e.b.ins().imul_imm_s(j, xst[a]);
            src = e.b.ins().iadd(src, t);
        }
        let dst = e.linear(None, idx, &yst);
        let v = e.load_ty(ty, x, src);
        e.store_ty(v, y, dst);
    });
    Ok(())
}
