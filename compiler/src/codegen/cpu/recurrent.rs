//! RNN, GRU and LSTM layers. Per direction: the input projections of every
//! step, `XW[seq*batch, G*hid] = X · W_dᵀ`, are one `dnnc_sgemm` up front;
//! then a generated loop over the time steps (reversed for the backward
//! direction) computes `HR = H · R_dᵀ` with `dnnc_sgemm` and evaluates the
//! gates with generated f32x4 code (the op's activations, clip, GRU's
//! `linear_before_reset` — otherwise a second GEMM on `r ⊙ H` — LSTM's
//! `input_forget` and peepholes). The hidden and cell states live in the
//! `Y_h` / `Y_c` results themselves, initialised from `initial_h` /
//! `initial_c`, and every step's hidden state is also written to `Y`.

use super::emit::Emit;
use super::extended::{ld, sgemm, st, vec_loop, ws_bytes};
use super::group::Kernel;
use super::movement::strided_copy;
use super::{math, KCtx};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::op::{CellKind, Recurrent, RnnActivation, RnnDirection};
use dnnc_ir::{DType, Graph, Op};

/// Static sizes of one recurrent layer.
struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hid: usize,
    gates: usize,
    dirs: usize,
}

fn dims(g: &Graph, k: &Kernel) -> Result<(Recurrent, Dims), String> {
    let node = g.node(k.nodes[0]);
    let Op::Recurrent(r) = &node.op else {
        return Err("not a recurrent layer".into());
    };
    let x = &g.value(node.inputs[0]).ty.shape;
    let &[seq, batch, input] = x.as_slice() else {
        return Err(format!("X must have rank 3, found {x:?}"));
    };
    let d = Dims {
        seq,
        batch,
        input,
        hid: r.hidden_size,
        gates: r.cell.gates(),
        dirs: r.direction.count(),
    };
    if r.activations.len() != d.dirs * r.cell.activations_per_direction() {
        return Err("wrong number of activations".into());
    }
    Ok((r.clone(), d))
}

/// Workspaces: `XW[seq*batch, G*hid]`, `HR[batch, G*hid]`, and for GRU
/// without `linear_before_reset` `r ⊙ H` and its product with `R_h`
/// (`[batch, hid]` each).
pub(crate) fn workspaces(g: &Graph, k: &Kernel) -> Result<Vec<usize>, String> {
    let (_, d) = dims(g, k)?;
    let gh = d.gates * d.hid;
    Ok(vec![
        ws_bytes(d.seq * d.batch * gh * 4),
        ws_bytes(d.batch * gh * 4),
        ws_bytes(d.batch * d.hid * 4),
        ws_bytes(d.batch * d.hid * 4),
    ])
}

/// An activation on f32x4 lanes, with the interpreter's NaN behaviour.
fn act(e: &mut Emit<'_>, a: RnnActivation, x: Value) -> Value {
    match a {
        // f32::max(x, 0): NaN gives 0.
        RnnActivation::Relu => {
            let z = e.vf(0.0);
            e.fsel(FloatCC::GreaterThan, x, z, x, z)
        }
        RnnActivation::Tanh => math::tanh(e, x),
        RnnActivation::Sigmoid => math::sigmoid(e, x),
        RnnActivation::HardSigmoid { alpha, beta } => {
            let a = e.vf(alpha);
            let b = e.vf(beta);
            let t = e.b.ins().fmul(a, x);
            let t = e.b.ins().fadd(t, b);
            clamp(e, t, 0.0, 1.0)
        }
    }
}

/// `x` clamped to `[lo, hi]`; NaN stays NaN.
fn clamp(e: &mut Emit<'_>, x: Value, lo: f32, hi: f32) -> Value {
    let l = e.vf(lo);
    let h = e.vf(hi);
    let y = e.fsel(FloatCC::LessThan, x, l, l, x);
    e.fsel(FloatCC::GreaterThan, y, h, h, y)
}

/// Per-(batch row) base element offsets for the gate code.
#[derive(Clone, Copy)]
struct Rows {
    /// Row of `XW` for this (t, b): `(t*batch + b) * G*hid`.
    xw: Value,
    /// Row of `HR`: `b * G*hid`.
    hr: Value,
    /// Row of the states and `r ⊙ H` buffers: `b * hid`.
    s: Value,
    /// Row of `Y`: `((t*dirs + d)*batch + b) * hid`.
    y: Value,
}

/// Buffers of one direction.
#[derive(Clone, Copy)]
struct Bufs {
    xw: Value,
    hr: Value,
    rh: Value,
    hr2: Value,
    /// `B[d]`: `Wb` then `Rb`.
    bias: Value,
    /// `Y_h[d]` (the hidden state).
    h: Value,
    /// `Y_c[d]` (LSTM cell state).
    c: Option<Value>,
    /// `P[d]` (LSTM peepholes).
    p: Option<Value>,
    y: Value,
}

/// The gate code's view of one layer and direction.
struct Cell<'r> {
    r: &'r Recurrent,
    acts: &'r [RnnActivation],
    hid: usize,
    gh: usize,
    bufs: Bufs,
}

impl Cell<'_> {
    fn clip(&self, e: &mut Emit<'_>, v: Value) -> Value {
        if self.r.clip.is_finite() {
            clamp(e, v, -self.r.clip, self.r.clip)
        } else {
            v
        }
    }

    /// `x·W + Wb` of gate `j` at hidden index `k`.
    fn xw(&self, e: &mut Emit<'_>, rows: Rows, j: usize, k: Value, v: bool) -> Value {
        let i = e.b.ins().iadd_imm_s(rows.xw, (j * self.hid) as i64);
        let i = e.b.ins().iadd(i, k);
        let a = ld(e, self.bufs.xw, i, v);
        let bi = e.b.ins().iadd_imm_s(k, (j * self.hid) as i64);
        let b = ld(e, self.bufs.bias, bi, v);
        e.b.ins().fadd(a, b)
    }

    /// `h·R + Rb` of gate `j` at hidden index `k`.
    fn hr(&self, e: &mut Emit<'_>, rows: Rows, j: usize, k: Value, v: bool) -> Value {
        let i = e.b.ins().iadd_imm_s(rows.hr, (j * self.hid) as i64);
        let i = e.b.ins().iadd(i, k);
        let a = ld(e, self.bufs.hr, i, v);
        let bi = e.b.ins().iadd_imm_s(k, (self.gh + j * self.hid) as i64);
        let b = ld(e, self.bufs.bias, bi, v);
        e.b.ins().fadd(a, b)
    }

    /// Pre-activation of gate `j`: `x·W + Wb + h·R + Rb`.
    fn pre(&self, e: &mut Emit<'_>, rows: Rows, j: usize, k: Value, v: bool) -> Value {
        let a = self.xw(e, rows, j, k, v);
        let b = self.hr(e, rows, j, k, v);
        e.b.ins().fadd(a, b)
    }

    /// Peephole `j` (0 i, 1 o, 2 f) times `c`, added to `x`.
    fn peep(&self, e: &mut Emit<'_>, x: Value, j: usize, k: Value, c: Value, v: bool) -> Value {
        let Some(p) = self.bufs.p else {
            return x;
        };
        let i = e.b.ins().iadd_imm_s(k, (j * self.hid) as i64);
        let pv = ld(e, p, i, v);
        let t = e.b.ins().fmul(pv, c);
        e.b.ins().fadd(x, t)
    }

    /// Stores the new hidden state to the state and to `Y`.
    fn put_h(&self, e: &mut Emit<'_>, rows: Rows, k: Value, hn: Value, v: bool) {
        let si = e.b.ins().iadd(rows.s, k);
        st(e, hn, self.bufs.h, si, v);
        let yi = e.b.ins().iadd(rows.y, k);
        st(e, hn, self.bufs.y, yi, v);
    }

    /// The gate code of one (t, b) row at hidden indices `k..k+lanes`.
    fn step(&self, e: &mut Emit<'_>, rows: Rows, k: Value, v: bool) {
        let si = e.b.ins().iadd(rows.s, k);
        match self.r.cell {
            CellKind::Rnn => {
                let p = self.pre(e, rows, 0, k, v);
                let p = self.clip(e, p);
                let hn = act(e, self.acts[0], p);
                self.put_h(e, rows, k, hn, v);
            }
            CellKind::Gru {
                linear_before_reset,
            } => {
                let hp = ld(e, self.bufs.h, si, v);
                let z = self.pre(e, rows, 0, k, v);
                let z = self.clip(e, z);
                let z = act(e, self.acts[0], z);
                let xh = self.xw(e, rows, 2, k, v);
                let rec = if linear_before_reset {
                    let r = self.pre(e, rows, 1, k, v);
                    let r = self.clip(e, r);
                    let r = act(e, self.acts[0], r);
                    let hr = self.hr(e, rows, 2, k, v);
                    e.b.ins().fmul(r, hr)
                } else {
                    // (r ⊙ H) · R_hᵀ was computed into hr2.
                    let a = ld(e, self.bufs.hr2, si, v);
                    let bi = e.b.ins().iadd_imm_s(k, (self.gh + 2 * self.hid) as i64);
                    let b = ld(e, self.bufs.bias, bi, v);
                    e.b.ins().fadd(a, b)
                };
                let ht = e.b.ins().fadd(xh, rec);
                let ht = self.clip(e, ht);
                let ht = act(e, self.acts[1], ht);
                // (1 - z) * ht + z * hp
                let one = e.vf(1.0);
                let omz = e.b.ins().fsub(one, z);
                let a = e.b.ins().fmul(omz, ht);
                let b = e.b.ins().fmul(z, hp);
                let hn = e.b.ins().fadd(a, b);
                self.put_h(e, rows, k, hn, v);
            }
            CellKind::Lstm { input_forget } => {
                let Some(cbuf) = self.bufs.c else { return };
                let cp = ld(e, cbuf, si, v);
                let i = self.pre(e, rows, 0, k, v);
                let i = self.peep(e, i, 0, k, cp, v);
                let i = self.clip(e, i);
                let i = act(e, self.acts[0], i);
                let f = if input_forget {
                    let one = e.vf(1.0);
                    e.b.ins().fsub(one, i)
                } else {
                    let f = self.pre(e, rows, 2, k, v);
                    let f = self.peep(e, f, 2, k, cp, v);
                    let f = self.clip(e, f);
                    act(e, self.acts[0], f)
                };
                let cc = self.pre(e, rows, 3, k, v);
                let cc = self.clip(e, cc);
                let cc = act(e, self.acts[1], cc);
                let a = e.b.ins().fmul(f, cp);
                let b = e.b.ins().fmul(i, cc);
                let ct = e.b.ins().fadd(a, b);
                let o = self.pre(e, rows, 1, k, v);
                let o = self.peep(e, o, 1, k, ct, v);
                let o = self.clip(e, o);
                let o = act(e, self.acts[0], o);
                let hc = act(e, self.acts[2], ct);
                let hn = e.b.ins().fmul(o, hc);
                st(e, ct, cbuf, si, v);
                self.put_h(e, rows, k, hn, v);
            }
        }
    }

    /// GRU without `linear_before_reset`, first pass: `rh = r ⊙ H`.
    fn reset_times_h(&self, e: &mut Emit<'_>, rows: Rows, k: Value, v: bool) {
        let si = e.b.ins().iadd(rows.s, k);
        let hp = ld(e, self.bufs.h, si, v);
        let r = self.pre(e, rows, 1, k, v);
        let r = self.clip(e, r);
        let r = act(e, self.acts[0], r);
        let rh = e.b.ins().fmul(r, hp);
        st(e, rh, self.bufs.rh, si, v);
    }
}

/// Lowers a recurrent kernel.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let (r, d) = dims(c.g, c.k)?;
    let node = c.g.node(c.k.nodes[0]);
    let lstm = matches!(r.cell, CellKind::Lstm { .. });
    let arg = |i: usize| -> Result<usize, String> {
        let v = *node.inputs.get(i).ok_or("missing recurrent input")?;
        c.arg(v)
    };
    let out = |i: usize| -> Result<usize, String> {
        let v = *node.outputs.get(i).ok_or("missing recurrent result")?;
        c.arg(v)
    };
    let ws = |i: usize| c.ws.get(i).copied().ok_or("missing recurrent workspace");
    let (x, w, rr, bias, h0) = (
        e.bufs[arg(0)?],
        e.bufs[arg(1)?],
        e.bufs[arg(2)?],
        e.bufs[arg(3)?],
        e.bufs[arg(4)?],
    );
    let c0 = if lstm { Some(e.bufs[arg(5)?]) } else { None };
    let p = if lstm && node.inputs.len() > 6 {
        Some(e.bufs[arg(6)?])
    } else {
        None
    };
    let (y, yh) = (e.bufs[out(0)?], e.bufs[out(1)?]);
    let yc = if lstm { Some(e.bufs[out(2)?]) } else { None };
    let (xw, hr, rh, hr2) = (
        e.bufs[ws(0)?],
        e.bufs[ws(1)?],
        e.bufs[ws(2)?],
        e.bufs[ws(3)?],
    );
    let (hid, batch) = (d.hid, d.batch);
    let gh = d.gates * hid;
    let per = r.cell.activations_per_direction();
    let state = batch * hid;
    let gru_split = matches!(
        r.cell,
        CellKind::Gru {
            linear_before_reset: false
        }
    );
    for dir in 0..d.dirs {
        let reverse = r.direction == RnnDirection::Reverse || dir == 1;
        let off = |e: &mut Emit<'_>, base: Value, elems: usize| {
            let o = e.ci(elems as i64);
            e.addr(base, o, 4)
        };
        let bufs = Bufs {
            xw,
            hr,
            rh,
            hr2,
            bias: off(e, bias, dir * 2 * gh),
            h: off(e, yh, dir * state),
            c: yc.map(|b| off(e, b, dir * state)),
            p: p.map(|b| off(e, b, dir * 3 * hid)),
            y,
        };
        let h0d = off(e, h0, dir * state);
        strided_copy(e, &[state], bufs.h, 0, &[1], h0d, 0, &[1], DType::F32);
        if let (Some(c0), Some(cd)) = (c0, bufs.c) {
            let c0d = off(e, c0, dir * state);
            strided_copy(e, &[state], cd, 0, &[1], c0d, 0, &[1], DType::F32);
        }
        let wd = off(e, w, dir * gh * d.input);
        let rd = off(e, rr, dir * gh * hid);
        // XW = X · W_dᵀ for every step at once.
        sgemm(
            e,
            (d.seq * batch, gh, d.input),
            x,
            (d.input as i64, 1),
            wd,
            (1, d.input as i64),
            xw,
            (gh as i64, 1),
            (1.0, 0.0),
        );
        let cell = Cell {
            r: &r,
            acts: &r.activations[dir * per..(dir + 1) * per],
            hid,
            gh,
            bufs,
        };
        e.for_n(d.seq, |e, step| {
            let t = if reverse {
                let last = e.ci(d.seq as i64 - 1);
                e.b.ins().isub(last, step)
            } else {
                step
            };
            // HR = H · R_dᵀ (only the z, r gates for split GRU).
            let nr = if gru_split { 2 * hid } else { gh };
            sgemm(
                e,
                (batch, nr, hid),
                bufs.h,
                (hid as i64, 1),
                rd,
                (1, hid as i64),
                hr,
                (gh as i64, 1),
                (1.0, 0.0),
            );
            let rows_of = |e: &mut Emit<'_>, b: Value| {
                let tb = e.b.ins().imul_imm_s(t, batch as i64);
                let tb = e.b.ins().iadd(tb, b);
                let xw_row = e.b.ins().imul_imm_s(tb, gh as i64);
                let hr_row = e.b.ins().imul_imm_s(b, gh as i64);
                let s_row = e.b.ins().imul_imm_s(b, hid as i64);
                let ty = e.b.ins().imul_imm_s(t, d.dirs as i64);
                let ty = e.b.ins().iadd_imm_s(ty, dir as i64);
                let ty = e.b.ins().imul_imm_s(ty, batch as i64);
                let ty = e.b.ins().iadd(ty, b);
                let y_row = e.b.ins().imul_imm_s(ty, hid as i64);
                Rows {
                    xw: xw_row,
                    hr: hr_row,
                    s: s_row,
                    y: y_row,
                }
            };
            if gru_split {
                e.for_n(batch, |e, b| {
                    let rows = rows_of(e, b);
                    vec_loop(e, hid, &mut |e, k, v| cell.reset_times_h(e, rows, k, v));
                });
                let rh_r = off(e, rd, 2 * hid * hid);
                sgemm(
                    e,
                    (batch, hid, hid),
                    rh,
                    (hid as i64, 1),
                    rh_r,
                    (1, hid as i64),
                    hr2,
                    (hid as i64, 1),
                    (1.0, 0.0),
                );
            }
            e.for_n(batch, |e, b| {
                let rows = rows_of(e, b);
                vec_loop(e, hid, &mut |e, k, v| cell.step(e, rows, k, v));
            });
        });
    }
    Ok(())
}
