//! Static Resize: the taps of every output position along each axis (input
//! offset and weight; one tap for nearest, two for linear) are computed at
//! compile time with the interpreter's formulas, written into a workspace
//! table by the kernel's prologue, and a generated loop nest over the
//! output sums the product of its axes' taps. Axes that keep their length
//! and map identically index the input directly.

use super::emit::Emit;
use super::extended::ws_bytes;
use super::group::Kernel;
use super::KCtx;
use cranelift_codegen::ir::types::{F32, I64};
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::op::{Resize, ResizeMode};
use dnnc_ir::{Graph, Op};

/// Taps of one axis: per output position, `taps` (input index, weight)
/// pairs (a missing second linear tap repeats the first with weight 0).
struct AxisTaps {
    taps: usize,
    entries: Vec<(usize, f32)>,
}

impl AxisTaps {
    /// Builds the table from the interpreter's per-axis taps
    /// (`dnnc_runtime::resize_axis_taps`), padding linear positions that
    /// need one tap with a weight-0 repeat so every position has `taps`.
    fn of(len_in: usize, len_out: usize, scale: Option<f32>, p: &Resize) -> AxisTaps {
        let taps = match p.mode {
            ResizeMode::Nearest => 1,
            ResizeMode::Linear => 2,
        };
        let mut entries = Vec::with_capacity(len_out * taps);
        for t in dnnc_runtime::resize_axis_taps(len_in, len_out, scale, p) {
            let first = t[0];
            entries.extend_from_slice(&t);
            for _ in t.len()..taps {
                entries.push((first.0, 0.0));
            }
        }
        AxisTaps { taps, entries }
    }

    /// Whether output position `x` reads input `x` alone with weight 1.
    fn is_identity(&self, len_in: usize, len_out: usize) -> bool {
        len_in == len_out
            && (0..len_out).all(|x| {
                let t = &self.entries[x * self.taps..(x + 1) * self.taps];
                t[0] == (x, 1.0) && t[1..].iter().all(|&(_, w)| w == 0.0)
            })
    }
}

/// Per-axis plan: `None` for an identity axis, else the taps and where the
/// axis's table starts in the workspace (in entries).
type Plan = Vec<Option<(AxisTaps, usize)>>;

fn plan(g: &Graph, k: &Kernel) -> Result<(Plan, usize, Vec<usize>, Vec<usize>), String> {
    let node = g.node(k.nodes[0]);
    let Op::Resize(p) = &node.op else {
        return Err("not a Resize".into());
    };
    let s = g.value(node.inputs[0]).ty.shape.clone();
    let out = g.value(node.outputs[0]).ty.shape.clone();
    if p.sizes != out || (!p.scales.is_empty() && p.scales.len() != s.len()) {
        return Err("Resize sizes or scales do not match the result".into());
    }
    if out.iter().product::<usize>() > 0 && s.contains(&0) {
        return Err(format!("cannot resize the empty input {s:?}"));
    }
    let mut entries = 0;
    let mut axes = Vec::with_capacity(s.len());
    for d in 0..s.len() {
        if out[d] == 0 || s[d] == 0 {
            axes.push(None);
            continue;
        }
        let t = AxisTaps::of(s[d], out[d], p.scales.get(d).copied(), p);
        if t.is_identity(s[d], out[d]) {
            axes.push(None);
        } else {
            let n = t.entries.len();
            axes.push(Some((t, entries)));
            entries += n;
        }
    }
    Ok((axes, entries, s, out))
}

/// Workspace: the tap table, `entries` i64 offsets then `entries` f32
/// weights.
pub(crate) fn workspaces(g: &Graph, k: &Kernel) -> Result<Vec<usize>, String> {
    let (_, entries, _, _) = plan(g, k)?;
    Ok(vec![ws_bytes(entries * 12)])
}

/// Lowers a Resize kernel.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<(), String> {
    let (axes, entries, s, out) = plan(c.g, c.k)?;
    let node = c.g.node(c.k.nodes[0]);
    let x = e.bufs[c.arg(node.inputs[0])?];
    let y = e.bufs[c.arg(node.outputs[0])?];
    let tab = e.bufs[*c.ws.first().ok_or("missing tap-table workspace")?];
    if out.contains(&0) {
        return Ok(());
    }
    let r = s.len();
    let mut in_str = vec![1i64; r];
    for d in (0..r.saturating_sub(1)).rev() {
        in_str[d] = in_str[d + 1] * s[d + 1] as i64;
    }
    // Prologue: the tables (offsets pre-multiplied by the input stride).
    let wbase = e.ci(entries as i64 * 8);
    let wtab = e.b.ins().iadd(tab, wbase);
    for (d, a) in axes.iter().enumerate() {
        let Some((t, start)) = a else { continue };
        for (i, &(idx, w)) in t.entries.iter().enumerate() {
            let off = e.ci(idx as i64 * in_str[d]);
            e.b.ins()
                .store(super::emit::mem(), off, tab, ((start + i) * 8) as i32);
            let wv = e.cf(w);
            e.b.ins()
                .store(super::emit::mem(), wv, wtab, ((start + i) * 4) as i32);
        }
    }
    let out_str = super::elementwise::contiguous(&out);
    e.for_nest(&out, &mut |e, idx| {
        // Per axis: the candidate (offset, weight) list for this position.
        let mut per_axis: Vec<Vec<(Value, Option<Value>)>> = Vec::with_capacity(r);
        for d in 0..r {
            match &axes[d] {
                None => {
                    let o = e.b.ins().imul_imm_s(idx[d], in_str[d]);
                    per_axis.push(vec![(o, None)]);
                }
                Some((t, start)) => {
                    let base = e.b.ins().imul_imm_s(idx[d], t.taps as i64);
                    let base = e.b.ins().iadd_imm_s(base, *start as i64);
                    let mut list = Vec::with_capacity(t.taps);
                    for k in 0..t.taps {
                        let ei = e.b.ins().iadd_imm_s(base, k as i64);
                        let o = e.load_ty(I64, tab, ei);
                        let w = if t.taps == 1 {
                            None
                        } else {
                            Some(e.load_ty(F32, wtab, ei))
                        };
                        list.push((o, w));
                    }
                    per_axis.push(list);
                }
            }
        }
        // Sum over the product of the taps, in the interpreter's order.
        let combos: usize = per_axis.iter().map(Vec::len).product();
        let mut acc: Option<Value> = None;
        for mut ci in 0..combos {
            let mut choice = vec![0usize; r];
            for d in (0..r).rev() {
                choice[d] = ci % per_axis[d].len();
                ci /= per_axis[d].len();
            }
            let mut off: Option<Value> = None;
            let mut w: Option<Value> = None;
            for d in 0..r {
                let (o, wd) = per_axis[d][choice[d]];
                off = Some(match off {
                    Some(a) => e.b.ins().iadd(a, o),
                    None => o,
                });
                if let Some(wd) = wd {
                    w = Some(match w {
                        Some(a) => e.b.ins().fmul(a, wd),
                        None => wd,
                    });
                }
            }
            let off = match off {
                Some(o) => o,
                None => e.ci(0),
            };
            let v = e.load_f32(x, off);
            let term = match w {
                Some(w) => e.b.ins().fmul(w, v),
                None => v,
            };
            acc = Some(match acc {
                Some(a) => e.b.ins().fadd(a, term),
                None => term,
            });
        }
        let yo = e.linear(None, idx, &out_str);
        let v = match acc {
            Some(v) => v,
            None => e.cf(0.0),
        };
        e.store_f32(v, y, yo);
    });
    Ok(())
}
