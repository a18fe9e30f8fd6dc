//! Contractions: Gemm, MatMul and Conv2d as calls to the native
//! `dnnc_sgemm` micro-kernel wrapped in generated code (batch loops, im2col
//! packing, direct depthwise loops) and a generated elementwise epilogue
//! (bias, Gemm's `beta * C`, fused activations and residual adds) applied
//! to each output tile right after it is produced.
//!
//! Convolution algorithms are pluggable: [`ConvAlgo`] names them and each
//! has its own lowering function; [`choose_algo`] picks one per conv.

use super::elementwise::{self, bcast_strides, contiguous, Operand, SubDomain};
use super::emit::Emit;
use super::group::Kernel;
use super::{CpuOptions, KCtx};
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::op::Conv2d;
use dnnc_ir::{DType, Graph, Op, ValueId};

/// A convolution algorithm of the CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvAlgo {
    /// Generated im2col packing per (image, group), then one GEMM.
    Im2col,
    /// 1x1, stride 1, no padding: the input already is the GEMM operand.
    Pointwise,
    /// One input channel per group and one output channel per group: a
    /// generated direct loop (no GEMM).
    Depthwise,
}

/// Static geometry of one convolution.
struct ConvGeom {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    g: usize,
    p: Conv2d,
}

impl ConvGeom {
    fn of(g: &Graph, k: &Kernel) -> Result<ConvGeom, String> {
        let node = g.node(k.nodes[0]);
        let Op::Conv2d(p) = &node.op else {
            return Err("not a Conv2d".into());
        };
        let x = &g.value(node.inputs[0]).ty.shape;
        let wt = &g.value(node.inputs[1]).ty.shape;
        let y = &g.value(node.outputs[0]).ty.shape;
        let (&[n, c, h, w], &[m, _, kh, kw], &[_, _, oh, ow]) =
            (x.as_slice(), wt.as_slice(), y.as_slice())
        else {
            return Err("Conv2d operands must be rank 4".into());
        };
        Ok(ConvGeom {
            n,
            c,
            h,
            w,
            m,
            kh,
            kw,
            oh,
            ow,
            g: p.group.max(1),
            p: p.clone(),
        })
    }

    fn applies(&self, a: ConvAlgo) -> bool {
        match a {
            ConvAlgo::Im2col => true,
            ConvAlgo::Pointwise => {
                self.kh == 1 && self.kw == 1 && self.p.strides == [1, 1] && self.p.pads == [0; 4]
            }
            ConvAlgo::Depthwise => self.g == self.c && self.g == self.m,
        }
    }
}

/// The algorithm for a conv: the forced one when it applies, else
/// depthwise, pointwise or im2col by shape.
fn choose_algo(geom: &ConvGeom, opts: &CpuOptions) -> ConvAlgo {
    if let Some(a) = opts.conv_algo {
        if geom.applies(a) {
            return a;
        }
    }
    [ConvAlgo::Depthwise, ConvAlgo::Pointwise]
        .into_iter()
        .find(|&a| geom.applies(a))
        .unwrap_or(ConvAlgo::Im2col)
}

/// Whether `op` can anchor a contraction kernel.
pub(crate) fn supports(op: &Op) -> bool {
    matches!(op, Op::Conv2d(_) | Op::Gemm(_) | Op::MatMul)
}

/// Whether the anchor's raw result needs its own scratch buffer: it is not
/// itself a kernel output and no output has its shape to be reused.
pub(crate) fn needs_acc_ws(g: &Graph, k: &Kernel) -> bool {
    let a = g.node(k.nodes[0]).outputs[0];
    let ty = &g.value(a).ty;
    !k.outputs.contains(&a) && !k.outputs.iter().any(|&v| g.value(v).ty == *ty)
}

/// Workspace sizes (bytes) a kernel needs: im2col columns, then the
/// accumulator when [`needs_acc_ws`].
pub(crate) fn workspaces(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Result<Vec<usize>, String> {
    let anchor = g.node(k.nodes[0]);
    let anchored = matches!(
        k.kind,
        super::group::KernelKind::Contraction | super::group::KernelKind::Reduction
    );
    if !anchored || anchor.outputs.len() != 1 {
        return Ok(Vec::new());
    }
    let mut ws = Vec::new();
    if matches!(anchor.op, Op::Conv2d(_)) {
        let geom = ConvGeom::of(g, k)?;
        if choose_algo(&geom, opts) == ConvAlgo::Im2col {
            let kk = geom.c / geom.g * geom.kh * geom.kw;
            ws.push(kk * geom.oh * geom.ow * 4);
        }
    }
    if needs_acc_ws(g, k) {
        ws.push(g.value(anchor.outputs[0]).ty.size_bytes());
    }
    Ok(ws)
}

/// Argument index of the accumulator (anchor result before the epilogue).
pub(crate) fn acc_arg(c: &KCtx<'_>) -> Result<usize, String> {
    let a = c.g.node(c.k.nodes[0]).outputs[0];
    if needs_acc_ws(c.g, c.k) {
        return c
            .ws
            .last()
            .copied()
            .ok_or("missing accumulator workspace".into());
    }
    if c.k.outputs.contains(&a) {
        return c.arg(a);
    }
    let ty = &c.g.value(a).ty;
    let v =
        c.k.outputs
            .iter()
            .find(|&&v| c.g.value(v).ty == *ty)
            .ok_or("no buffer for the contraction result")?;
    c.arg(*v)
}

/// Lowers a contraction kernel; returns its error messages (none).
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    match &c.g.node(c.k.nodes[0]).op {
        Op::Conv2d(_) => lower_conv(e, c)?,
        Op::Gemm(p) => lower_gemm(e, c, p.alpha, p.beta, p.trans_a, p.trans_b)?,
        Op::MatMul => lower_matmul(e, c)?,
        other => return Err(format!("{} is not a contraction", other.name())),
    }
    Ok(Vec::new())
}

/// Emits `dnnc_sgemm(m, n, k, a, .., b, .., c, .., alpha, 0)`.
#[allow(clippy::too_many_arguments)]
fn sgemm(
    e: &mut Emit<'_>,
    (m, n, k): (usize, usize, usize),
    a: Value,
    (a_rs, a_cs): (i64, i64),
    b: Value,
    (b_rs, b_cs): (i64, i64),
    cp: Value,
    (c_rs, c_cs): (i64, i64),
    alpha: f32,
) {
    let mut args = vec![e.ci(m as i64), e.ci(n as i64), e.ci(k as i64), a];
    args.push(e.ci(a_rs));
    args.push(e.ci(a_cs));
    args.push(b);
    args.push(e.ci(b_rs));
    args.push(e.ci(b_cs));
    args.push(cp);
    args.push(e.ci(c_rs));
    args.push(e.ci(c_cs));
    args.push(e.cf(alpha));
    args.push(e.cf(0.0));
    let f = e.sgemm;
    e.b.ins().call(f, &args);
}

/// Pointer to element `idx` of f32 buffer `base`.
fn at(e: &mut Emit<'_>, base: Value, idx: Value) -> Value {
    e.addr(base, idx, 4)
}

/// The epilogue spec over the anchor's output domain: the anchor value is
/// `acc + scale * extra` (bias or Gemm's C), then the fused nodes.
pub(crate) fn epilogue<'g>(
    c: &KCtx<'g>,
    acc: usize,
    extra: Option<(ValueId, Vec<usize>, f32)>,
) -> Result<Option<elementwise::EwSpec<'g>>, String> {
    let a = c.g.node(c.k.nodes[0]).outputs[0];
    let domain = c.g.value(a).ty.shape.clone();
    let rest = &c.k.nodes[1..];
    let acc_is_out = c.k.outputs.contains(&a) && c.arg(a)? == acc;
    if rest.is_empty() && extra.is_none() && acc_is_out {
        return Ok(None);
    }
    let acc_op = Operand {
        arg: acc,
        dtype: DType::F32,
        strides: contiguous(&domain),
    };
    let extra = match extra {
        Some((v, eff, s)) => Some((
            Operand {
                arg: c.arg(v)?,
                dtype: DType::F32,
                strides: bcast_strides(&eff, &domain)
                    .ok_or("bias does not broadcast to the result")?,
            },
            s,
        )),
        None => None,
    };
    let spec = elementwise::spec_for(
        c.g,
        &domain,
        rest,
        &c.arg_of,
        vec![(a, acc_op, extra)],
        &c.k.outputs,
    )?;
    Ok(Some(spec))
}

fn lower_gemm(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    alpha: f32,
    beta: f32,
    ta: bool,
    tb: bool,
) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let sa = c.g.value(node.inputs[0]).ty.shape.clone();
    let sb = c.g.value(node.inputs[1]).ty.shape.clone();
    let (m, k) = if ta { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
    let n = if tb { sb[0] } else { sb[1] };
    let a_str = if ta { (1, m as i64) } else { (k as i64, 1) };
    let b_str = if tb { (1, k as i64) } else { (n as i64, 1) };
    let acc = acc_arg(c)?;
    let (a, b, out) = (
        e.bufs[c.arg(node.inputs[0])?],
        e.bufs[c.arg(node.inputs[1])?],
        e.bufs[acc],
    );
    sgemm(e, (m, n, k), a, a_str, b, b_str, out, (n as i64, 1), alpha);
    let extra = match node.inputs.get(2) {
        Some(&cv) if beta != 0.0 => Some((cv, c.g.value(cv).ty.shape.clone(), beta)),
        _ => None,
    };
    if let Some(spec) = epilogue(c, acc, extra)? {
        let sub = SubDomain::full(&spec.domain);
        elementwise::emit(e, &spec, &sub)?;
    }
    Ok(())
}

fn lower_matmul(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let node = c.g.node(c.k.nodes[0]);
    let mut sa = c.g.value(node.inputs[0]).ty.shape.clone();
    let mut sb = c.g.value(node.inputs[1]).ty.shape.clone();
    if sa.len() == 1 {
        sa.insert(0, 1);
    }
    if sb.len() == 1 {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let n = sb[sb.len() - 1];
    let batch = dnnc_ir::infer::broadcast_shapes(&sa[..sa.len() - 2], &sb[..sb.len() - 2])?;
    let bs_a = bcast_strides(&sa[..sa.len() - 2], &batch).ok_or("A batch does not broadcast")?;
    let bs_b = bcast_strides(&sb[..sb.len() - 2], &batch).ok_or("B batch does not broadcast")?;
    let out_b = contiguous(&batch);
    let (mk, kn, mn) = ((m * k) as i64, (k * n) as i64, (m * n) as i64);
    let sa_: Vec<i64> = bs_a.iter().map(|s| s * mk).collect();
    let sb_: Vec<i64> = bs_b.iter().map(|s| s * kn).collect();
    let so_: Vec<i64> = out_b.iter().map(|s| s * mn).collect();
    let acc = acc_arg(c)?;
    let (a, b, out) = (
        e.bufs[c.arg(node.inputs[0])?],
        e.bufs[c.arg(node.inputs[1])?],
        e.bufs[acc],
    );
    e.for_nest(&batch, &mut |e, idx| {
        let oa = e.linear(None, idx, &sa_);
        let ob = e.linear(None, idx, &sb_);
        let oo = e.linear(None, idx, &so_);
        let (pa, pb, po) = (at(e, a, oa), at(e, b, ob), at(e, out, oo));
        sgemm(
            e,
            (m, n, k),
            pa,
            (k as i64, 1),
            pb,
            (n as i64, 1),
            po,
            (n as i64, 1),
            1.0,
        );
    });
    if let Some(spec) = epilogue(c, acc, None)? {
        let sub = SubDomain::full(&spec.domain);
        elementwise::emit(e, &spec, &sub)?;
    }
    Ok(())
}

fn lower_conv(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let geom = ConvGeom::of(c.g, c.k)?;
    let node = c.g.node(c.k.nodes[0]);
    let acc = acc_arg(c)?;
    let bias = node.inputs.get(2).map(|&b| (b, vec![geom.m, 1, 1], 1.0f32));
    let spec = epilogue(c, acc, bias)?;
    let x = e.bufs[c.arg(node.inputs[0])?];
    let w = e.bufs[c.arg(node.inputs[1])?];
    let y = e.bufs[acc];
    match choose_algo(&geom, c.opts) {
        ConvAlgo::Depthwise => conv_depthwise(e, &geom, x, w, y, spec.as_ref()),
        algo => {
            let col = match algo {
                ConvAlgo::Im2col => Some(e.bufs[*c.ws.first().ok_or("missing im2col workspace")?]),
                _ => None,
            };
            conv_gemm(e, &geom, x, w, y, col, spec.as_ref())
        }
    }
}

/// Runs the epilogue on output channels `[m0, m0 + mg)` of image `n`.
fn tile_epilogue(
    e: &mut Emit<'_>,
    spec: Option<&elementwise::EwSpec<'_>>,
    n: Value,
    m0: Value,
    mg: usize,
) -> Result<(), String> {
    let Some(spec) = spec else {
        return Ok(());
    };
    let d = &spec.domain;
    let sub = SubDomain {
        starts: vec![Some(n), Some(m0), None, None],
        lens: vec![1, mg, d[2], d[3]],
    };
    elementwise::emit(e, spec, &sub)
}

/// Im2col (or pointwise, with `col == None`) + GEMM per (image, group),
/// each followed by its epilogue.
fn conv_gemm(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    col: Option<Value>,
    spec: Option<&elementwise::EwSpec<'_>>,
) -> Result<(), String> {
    let (cg, mg) = (geo.c / geo.g, geo.m / geo.g);
    let kk = cg * geo.kh * geo.kw;
    let p = geo.oh * geo.ow;
    let hw = (geo.h * geo.w) as i64;
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.g, |e, gi| {
            // x + (n*C + gi*cg) * H*W
            let t = e.b.ins().imul_imm_s(n, geo.c as i64);
            let t2 = e.b.ins().imul_imm_s(gi, cg as i64);
            let cbase = e.b.ins().iadd(t, t2);
            let xoff = e.b.ins().imul_imm_s(cbase, hw);
            let xg = at(e, x, xoff);
            let bmat = match col {
                Some(col) => {
                    im2col(e, geo, xg, col, cg);
                    col
                }
                None => xg,
            };
            let woff = e.b.ins().imul_imm_s(gi, (mg * kk) as i64);
            let wg = at(e, w, woff);
            let t = e.b.ins().imul_imm_s(n, geo.m as i64);
            let m0 = e.b.ins().imul_imm_s(gi, mg as i64);
            let mrow = e.b.ins().iadd(t, m0);
            let yoff = e.b.ins().imul_imm_s(mrow, p as i64);
            let yg = at(e, y, yoff);
            sgemm(
                e,
                (mg, p, kk),
                wg,
                (kk as i64, 1),
                bmat,
                (p as i64, 1),
                yg,
                (p as i64, 1),
                1.0,
            );
            if let Err(m) = tile_epilogue(e, spec, n, m0, mg) {
                err.get_or_insert(m);
            }
        });
    });
    err.map_or(Ok(()), Err)
}

/// Static range of output positions `o` whose input position
/// `o * stride - pad + tap * dil` lies in `[0, size)`.
pub(crate) fn valid_range(
    out: usize,
    size: usize,
    stride: usize,
    pad: usize,
    tap: usize,
    dil: usize,
) -> (usize, usize) {
    let off = tap as i64 * dil as i64 - pad as i64;
    let (s, size) = (stride as i64, size as i64);
    // o*s + off >= 0  =>  o >= ceil(-off / s)
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    // o*s + off <= size - 1  =>  o <= floor((size - 1 - off) / s)
    let hi = if size - 1 - off < 0 {
        0
    } else {
        (size - 1 - off) / s + 1
    };
    let lo = lo.clamp(0, out as i64) as usize;
    let hi = hi.clamp(0, out as i64) as usize;
    (lo, hi.max(lo))
}

/// Writes zeros to `len` f32s at element `start` of `base` (f32x4 + tail).
fn zero_run(e: &mut Emit<'_>, base: Value, start: Value, len: usize) {
    if len == 0 {
        return;
    }
    let z = e.vf(0.0);
    let zs = e.cf(0.0);
    let v_end = len / 4 * 4;
    if v_end > 0 {
        let s = e.ci(0);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| {
            let i = e.b.ins().iadd(start, j);
            e.store_v(z, base, i);
        });
    }
    for j in v_end..len {
        let i = e.b.ins().iadd_imm_s(start, j as i64);
        e.store_f32(zs, base, i);
    }
}

/// Copies `len` f32s from `src[s0 + j*stride]` to `dst[d0 + j]`.
fn copy_run(
    e: &mut Emit<'_>,
    dst: Value,
    d0: Value,
    src: Value,
    s0: Value,
    len: usize,
    stride: usize,
) {
    if len == 0 {
        return;
    }
    let v_end = if stride == 1 { len / 4 * 4 } else { 0 };
    if v_end > 0 {
        let s = e.ci(0);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| {
            let si = e.b.ins().iadd(s0, j);
            let v = e.load_v(src, si);
            let di = e.b.ins().iadd(d0, j);
            e.store_v(v, dst, di);
        });
    }
    if v_end < len {
        let s = e.ci(v_end as i64);
        let en = e.ci(len as i64);
        e.for_range(s, en, 1, |e, j| {
            let t = e.b.ins().imul_imm_s(j, stride as i64);
            let si = e.b.ins().iadd(s0, t);
            let v = e.load_f32(src, si);
            let di = e.b.ins().iadd(d0, j);
            e.store_f32(v, dst, di);
        });
    }
}

/// Generated im2col for one (image, group): `col[(c*kh + i)*kw + j, oh*OW + ow]
/// = x[c, oh*sh - pt + i*dh, ow*sw - pl + j*dw]` (0 outside), with the valid
/// ranges of every tap computed at compile time.
fn im2col(e: &mut Emit<'_>, geo: &ConvGeom, xg: Value, col: Value, cg: usize) {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let p = geo.oh * geo.ow;
    let taps = geo.kh * geo.kw;
    e.for_n(cg, |e, ci| {
        let xc = e.b.ins().imul_imm_s(ci, (geo.h * geo.w) as i64);
        for i in 0..geo.kh {
            let (olo, ohi) = valid_range(geo.oh, geo.h, sh, pt, i, dh);
            for j in 0..geo.kw {
                let (wlo, whi) = valid_range(geo.ow, geo.w, sw, pl, j, dw);
                // Row of col.
                let r = e.b.ins().imul_imm_s(ci, taps as i64);
                let r = e.b.ins().iadd_imm_s(r, (i * geo.kw + j) as i64);
                let row0 = e.b.ins().imul_imm_s(r, p as i64);
                // Rows of the output outside [olo, ohi) are all padding.
                zero_run(e, col, row0, olo * geo.ow);
                let tail0 = e.b.ins().iadd_imm_s(row0, (ohi * geo.ow) as i64);
                zero_run(e, col, tail0, (geo.oh - ohi) * geo.ow);
                if ohi > olo {
                    let s = e.ci(olo as i64);
                    let en = e.ci(ohi as i64);
                    e.for_range(s, en, 1, |e, oh| {
                        // ih = oh*sh - pt + i*dh
                        let ih = e.b.ins().imul_imm_s(oh, sh as i64);
                        let ih = e.b.ins().iadd_imm_s(ih, i as i64 * dh as i64 - pt as i64);
                        let d = e.b.ins().imul_imm_s(oh, geo.ow as i64);
                        let d = e.b.ins().iadd(row0, d);
                        zero_run(e, col, d, wlo);
                        let dt = e.b.ins().iadd_imm_s(d, whi as i64);
                        zero_run(e, col, dt, geo.ow - whi);
                        if whi > wlo {
                            let srow = e.b.ins().imul_imm_s(ih, geo.w as i64);
                            let srow = e.b.ins().iadd(srow, xc);
                            let iw0 = (wlo * sw + j * dw) as i64 - pl as i64;
                            let s0 = e.b.ins().iadd_imm_s(srow, iw0);
                            let d0 = e.b.ins().iadd_imm_s(d, wlo as i64);
                            copy_run(e, col, d0, xg, s0, whi - wlo, sw);
                        }
                    });
                }
            }
        }
    });
}

/// Direct depthwise convolution: per (image, channel), zero the output
/// plane, then for every tap add `w * x` over the tap's valid rectangle
/// (f32x4 along rows when the stride is 1), then the channel's epilogue.
fn conv_depthwise(
    e: &mut Emit<'_>,
    geo: &ConvGeom,
    x: Value,
    w: Value,
    y: Value,
    spec: Option<&elementwise::EwSpec<'_>>,
) -> Result<(), String> {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let p = geo.oh * geo.ow;
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.c, |e, ch| {
            let t = e.b.ins().imul_imm_s(n, geo.c as i64);
            let plane = e.b.ins().iadd(t, ch);
            let yo = e.b.ins().imul_imm_s(plane, p as i64);
            let xo = e.b.ins().imul_imm_s(plane, (geo.h * geo.w) as i64);
            zero_run(e, y, yo, p);
            let wo = e.b.ins().imul_imm_s(ch, (geo.kh * geo.kw) as i64);
            for i in 0..geo.kh {
                let (olo, ohi) = valid_range(geo.oh, geo.h, sh, pt, i, dh);
                for j in 0..geo.kw {
                    let (wlo, whi) = valid_range(geo.ow, geo.w, sw, pl, j, dw);
                    if ohi <= olo || whi <= wlo {
                        continue;
                    }
                    let wi = e.b.ins().iadd_imm_s(wo, (i * geo.kw + j) as i64);
                    let ws = e.load_f32(w, wi);
                    let wv = e.splat(ws);
                    let len = whi - wlo;
                    let s = e.ci(olo as i64);
                    let en = e.ci(ohi as i64);
                    e.for_range(s, en, 1, |e, oh| {
                        let ih = e.b.ins().imul_imm_s(oh, sh as i64);
                        let ih = e.b.ins().iadd_imm_s(ih, i as i64 * dh as i64 - pt as i64);
                        let srow = e.b.ins().imul_imm_s(ih, geo.w as i64);
                        let srow = e.b.ins().iadd(srow, xo);
                        let s0 =
                            e.b.ins()
                                .iadd_imm_s(srow, (wlo * sw + j * dw) as i64 - pl as i64);
                        let d = e.b.ins().imul_imm_s(oh, geo.ow as i64);
                        let d = e.b.ins().iadd(d, yo);
                        let d0 = e.b.ins().iadd_imm_s(d, wlo as i64);
                        let v_end = if sw == 1 { len / 4 * 4 } else { 0 };
                        if v_end > 0 {
                            let a = e.ci(0);
                            let b = e.ci(v_end as i64);
                            e.for_range(a, b, 4, |e, jj| {
                                let si = e.b.ins().iadd(s0, jj);
                                let xv = e.load_v(x, si);
                                let di = e.b.ins().iadd(d0, jj);
                                let yv = e.load_v(y, di);
                                let pr = e.b.ins().fmul(xv, wv);
                                let r = e.b.ins().fadd(yv, pr);
                                e.store_v(r, y, di);
                            });
                        }
                        if v_end < len {
                            let a = e.ci(v_end as i64);
                            let b = e.ci(len as i64);
                            e.for_range(a, b, 1, |e, jj| {
                                let t = e.b.ins().imul_imm_s(jj, sw as i64);
                                let si = e.b.ins().iadd(s0, t);
                                let xs = e.load_f32(x, si);
                                let di = e.b.ins().iadd(d0, jj);
                                let ys = e.load_f32(y, di);
                                let pr = e.b.ins().fmul(xs, ws);
                                let r = e.b.ins().fadd(ys, pr);
                                e.store_f32(r, y, di);
                            });
                        }
                    });
                }
            }
            if let Err(m) = tile_epilogue(e, spec, n, ch, 1) {
                err.get_or_insert(m);
            }
        });
    });
    let _ = I64;
    err.map_or(Ok(()), Err)
}

/// The algorithm a conv kernel is lowered with (`None` for other kernels),
/// for profiles.
pub(crate) fn algo_of(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Option<ConvAlgo> {
    if k.kind != super::group::KernelKind::Contraction
        || !matches!(g.node(k.nodes[0]).op, Op::Conv2d(_))
    {
        return None;
    }
    ConvGeom::of(g, k).ok().map(|geom| choose_algo(&geom, opts))
}
