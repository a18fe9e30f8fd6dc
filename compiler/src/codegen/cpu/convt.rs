//! ConvTranspose2d as GEMM + col2im: per (image, group) one `dnnc_sgemm`
//! computes `col[M/g*kH*kW, H*W] = W_gᵀ · X_g`, then a generated scatter-add
//! loop (valid input ranges of every tap computed at compile time, f32x4
//! along rows when the stride is 1) accumulates the columns into the zeroed
//! output tile, and the epilogue (bias, fused activations) runs on the tile.

use super::contraction::{acc_arg, epilogue, needs_acc_ws, valid_range};
use super::elementwise::{self, SubDomain};
use super::emit::Emit;
use super::extended::{sgemm, ws_bytes};
use super::group::Kernel;
use super::KCtx;
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::op::ConvTranspose2d;
use dnnc_ir::{Graph, Op};

/// Static geometry of one transposed convolution.
struct Geom {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    mg: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    g: usize,
    p: ConvTranspose2d,
}

impl Geom {
    fn of(g: &Graph, k: &Kernel) -> Result<Geom, String> {
        let node = g.node(k.nodes[0]);
        let Op::ConvTranspose2d(p) = &node.op else {
            return Err("not a ConvTranspose2d".into());
        };
        let x = &g.value(node.inputs[0]).ty.shape;
        let wt = &g.value(node.inputs[1]).ty.shape;
        let y = &g.value(node.outputs[0]).ty.shape;
        let (&[n, c, h, w], &[_, mg, kh, kw], &[_, _, oh, ow]) =
            (x.as_slice(), wt.as_slice(), y.as_slice())
        else {
            return Err("ConvTranspose2d operands must be rank 4".into());
        };
        let grp = p.group.max(1);
        if c % grp != 0 {
            return Err(format!("{c} channels do not split into {grp} groups"));
        }
        Ok(Geom {
            n,
            c,
            h,
            w,
            mg,
            kh,
            kw,
            oh,
            ow,
            g: grp,
            p: p.clone(),
        })
    }

    /// Rows of the column matrix: `M/g * kH * kW`.
    fn rows(&self) -> usize {
        self.mg * self.kh * self.kw
    }
}

/// Workspaces: the column matrix, then the accumulator when needed.
pub(crate) fn workspaces(g: &Graph, k: &Kernel) -> Result<Vec<usize>, String> {
    let geo = Geom::of(g, k)?;
    let mut ws = vec![ws_bytes(geo.rows() * geo.h * geo.w * 4)];
    if needs_acc_ws(g, k) {
        ws.push(g.value(g.node(k.nodes[0]).outputs[0]).ty.size_bytes());
    }
    Ok(ws)
}

/// Lowers a ConvTranspose2d kernel.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let geo = Geom::of(c.g, c.k)?;
    let node = c.g.node(c.k.nodes[0]);
    let acc = acc_arg(c)?;
    let m = geo.mg * geo.g;
    let bias = node.inputs.get(2).map(|&b| (b, vec![m, 1, 1], 1.0f32));
    let spec = epilogue(c, acc, bias)?;
    let x = e.bufs[c.arg(node.inputs[0])?];
    let w = e.bufs[c.arg(node.inputs[1])?];
    let y = e.bufs[acc];
    let col = e.bufs[*c.ws.first().ok_or("missing column workspace")?];
    let (cg, rows, hw) = (geo.c / geo.g, geo.rows(), geo.h * geo.w);
    let plane = geo.oh * geo.ow;
    let mut err = None;
    e.for_n(geo.n, |e, n| {
        e.for_n(geo.g, |e, gi| {
            let t = e.b.ins().imul_imm_s(n, geo.c as i64);
            let t2 = e.b.ins().imul_imm_s(gi, cg as i64);
            let cbase = e.b.ins().iadd(t, t2);
            let xoff = e.b.ins().imul_imm_s(cbase, hw as i64);
            let xg = e.addr(x, xoff, 4);
            let woff = e.b.ins().imul_imm_s(gi, (cg * rows) as i64);
            let wg = e.addr(w, woff, 4);
            // col[r, p] = sum_ci w[ci, r] * x[ci, p]
            sgemm(
                e,
                (rows, hw, cg),
                wg,
                (1, rows as i64),
                xg,
                (hw as i64, 1),
                col,
                (hw as i64, 1),
                (1.0, 0.0),
            );
            let t = e.b.ins().imul_imm_s(n, m as i64);
            let m0 = e.b.ins().imul_imm_s(gi, geo.mg as i64);
            let mrow = e.b.ins().iadd(t, m0);
            let yoff = e.b.ins().imul_imm_s(mrow, plane as i64);
            let yg = e.addr(y, yoff, 4);
            col2im(e, &geo, col, yg);
            if let Some(spec) = &spec {
                let d = &spec.domain;
                let sub = SubDomain {
                    starts: vec![Some(n), Some(m0), None, None],
                    lens: vec![1, geo.mg, d[2], d[3]],
                };
                if let Err(msg) = elementwise::emit(e, spec, &sub) {
                    err.get_or_insert(msg);
                }
            }
        });
    });
    err.map_or(Ok(()), Err)
}

/// Zeroes the `M/g` output planes at `yg`, then adds every column row into
/// them: `y[mi, iy*sh + i*dh - pt, ix*sw + j*dw - pl] += col[(mi*kH + i)*kW
/// + j, iy*W + ix]` over the input positions that land in the output.
fn col2im(e: &mut Emit<'_>, geo: &Geom, col: Value, yg: Value) {
    let (sh, sw) = (geo.p.strides[0], geo.p.strides[1]);
    let (dh, dw) = (geo.p.dilations[0], geo.p.dilations[1]);
    let (pt, pl) = (geo.p.pads[0], geo.p.pads[1]);
    let plane = geo.oh * geo.ow;
    let hw = geo.h * geo.w;
    let zero = e.vf(0.0);
    let total = geo.mg * plane;
    super::extended::vec_loop(e, total, &mut |e, j, v| {
        super::extended::st(e, zero, yg, j, v);
    });
    e.for_n(geo.mg, |e, mi| {
        let ybase = e.b.ins().imul_imm_s(mi, plane as i64);
        let cbase = e.b.ins().imul_imm_s(mi, (geo.kh * geo.kw * hw) as i64);
        for i in 0..geo.kh {
            let (ylo, yhi) = valid_range(geo.h, geo.oh, sh, pt, i, dh);
            if yhi <= ylo {
                continue;
            }
            for j in 0..geo.kw {
                let (xlo, xhi) = valid_range(geo.w, geo.ow, sw, pl, j, dw);
                if xhi <= xlo {
                    continue;
                }
                let len = xhi - xlo;
                let tap = ((i * geo.kw + j) * hw) as i64;
                let s = e.ci(ylo as i64);
                let en = e.ci(yhi as i64);
                e.for_range(s, en, 1, |e, iy| {
                    // Output row oy = iy*sh + i*dh - pt.
                    let oy = e.b.ins().imul_imm_s(iy, sh as i64);
                    let oy = e.b.ins().iadd_imm_s(oy, (i * dh) as i64 - pt as i64);
                    let d = e.b.ins().imul_imm_s(oy, geo.ow as i64);
                    let d = e.b.ins().iadd(d, ybase);
                    let d0 =
                        e.b.ins()
                            .iadd_imm_s(d, (xlo * sw + j * dw) as i64 - pl as i64);
                    let s0 = e.b.ins().imul_imm_s(iy, geo.w as i64);
                    let s0 = e.b.ins().iadd(s0, cbase);
                    let s0 = e.b.ins().iadd_imm_s(s0, tap + xlo as i64);
                    if sw == 1 {
                        super::extended::vec_loop(e, len, &mut |e, jj, v| {
                            let si = e.b.ins().iadd(s0, jj);
                            let di = e.b.ins().iadd(d0, jj);
                            let a = super::extended::ld(e, col, si, v);
                            let b = super::extended::ld(e, yg, di, v);
                            let r = e.b.ins().fadd(b, a);
                            super::extended::st(e, r, yg, di, v);
                        });
                    } else {
                        e.for_n(len, |e, jj| {
                            let si = e.b.ins().iadd(s0, jj);
                            let t = e.b.ins().imul_imm_s(jj, sw as i64);
                            let di = e.b.ins().iadd(d0, t);
                            let a = e.load_f32(col, si);
                            let b = e.load_f32(yg, di);
                            let r = e.b.ins().fadd(b, a);
                            e.store_f32(r, yg, di);
                        });
                    }
                });
            }
        }
    });
}
