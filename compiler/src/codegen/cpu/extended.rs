//! Dispatch for the lowerings of the extended op set: ConvTranspose2d
//! (`convt.rs`), Einsum (`einsum.rs`), Resize (`resize.rs`) and RNN/GRU/LSTM
//! (`recurrent.rs`). Kept apart from the core contraction and movement
//! lowerings so each can grow without touching the others.

use super::emit::Emit;
use super::group::Kernel;
use super::{convt, einsum, recurrent, resize, KCtx};
use cranelift_codegen::ir::{InstBuilder, Value};
use dnnc_ir::{Graph, Op};

/// Whether `op` is one of the extended ops (it anchors its kernel).
pub(crate) fn supports(op: &Op) -> bool {
    matches!(
        op,
        Op::ConvTranspose2d(_) | Op::Einsum { .. } | Op::Resize(_) | Op::Recurrent(_)
    )
}

/// Workspace sizes (bytes) of a kernel anchored by an extended op, `None`
/// for any other kernel.
pub(crate) fn workspaces(g: &Graph, k: &Kernel) -> Option<Result<Vec<usize>, String>> {
    let anchor = k.anchor.unwrap_or(k.nodes[0]);
    Some(match &g.node(anchor).op {
        Op::ConvTranspose2d(_) => convt::workspaces(g, k),
        Op::Einsum { .. } => einsum::workspaces(g, k),
        Op::Resize(_) => resize::workspaces(g, k),
        Op::Recurrent(_) => recurrent::workspaces(g, k),
        _ => return None,
    })
}

/// Lowers a kernel anchored by an extended op; returns its error messages.
pub(crate) fn lower(e: &mut Emit<'_>, c: &KCtx<'_>) -> Result<Vec<String>, String> {
    match &c.g.node(c.anchor()).op {
        Op::ConvTranspose2d(_) => convt::lower(e, c),
        Op::Einsum { .. } => einsum::lower(e, c),
        Op::Resize(_) => resize::lower(e, c),
        Op::Recurrent(_) => recurrent::lower(e, c),
        other => Err(format!("{} is not an extended op", other.name())),
    }
    .map(|()| Vec::new())
}

/// Rounds a workspace size up to at least one f32, so no workspace is
/// empty.
pub(crate) fn ws_bytes(bytes: usize) -> usize {
    bytes.max(4)
}

/// Emits `dnnc_sgemm(m, n, k, a, .., b, .., c, .., alpha, beta)`: `C =
/// alpha * A * B + beta * C` with element strides `(row, column)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    e: &mut Emit<'_>,
    (m, n, k): (usize, usize, usize),
    a: Value,
    (a_rs, a_cs): (i64, i64),
    b: Value,
    (b_rs, b_cs): (i64, i64),
    cp: Value,
    (c_rs, c_cs): (i64, i64),
    (alpha, beta): (f32, f32),
) {
    if m == 0 || n == 0 {
        return;
    }
    let mut args = vec![e.ci(m as i64), e.ci(n as i64), e.ci(k as i64), a];
    for v in [a_rs, a_cs] {
        args.push(e.ci(v));
    }
    args.push(b);
    for v in [b_rs, b_cs] {
        args.push(e.ci(v));
    }
    args.push(cp);
    for v in [c_rs, c_cs] {
        args.push(e.ci(v));
    }
    args.push(e.cf(alpha));
    args.push(e.cf(beta));
    let f = e.sgemm;
    e.b.ins().call(f, &args);
}

/// Loads four f32s at element `idx` (`vector`), or one splat to all lanes,
/// so one f32x4 code path serves both the body and the tail of a loop.
pub(crate) fn ld(e: &mut Emit<'_>, base: Value, idx: Value, vector: bool) -> Value {
    if vector {
        e.load_v(base, idx)
    } else {
        let s = e.load_f32(base, idx);
        e.splat(s)
    }
}

/// Stores four f32s at element `idx` (`vector`), or lane 0 alone.
pub(crate) fn st(e: &mut Emit<'_>, v: Value, base: Value, idx: Value, vector: bool) {
    if vector {
        e.store_v(v, base, idx);
    } else {
        let s = e.lane0(v);
        e.store_f32(s, base, idx);
    }
}

/// `for j in 0..len` over f32 elements: f32x4 steps (`body(e, j, true)`)
/// then a scalar tail (`body(e, j, false)`).
pub(crate) fn vec_loop(
    e: &mut Emit<'_>,
    len: usize,
    body: &mut dyn FnMut(&mut Emit<'_>, Value, bool),
) {
    let v_end = len / 4 * 4;
    if v_end > 0 {
        let s = e.ci(0);
        let en = e.ci(v_end as i64);
        e.for_range(s, en, 4, |e, j| body(e, j, true));
    }
    if v_end < len {
        let s = e.ci(v_end as i64);
        let en = e.ci(len as i64);
        e.for_range(s, en, 1, |e, j| body(e, j, false));
    }
}
