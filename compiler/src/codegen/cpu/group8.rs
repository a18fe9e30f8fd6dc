//! Lowering of grouped convs with 8 input and 8 output channels per group
//! (`ConvGeom::grouped8`) under the `direct` algorithm: one call of the
//! runtime kernel `dnnc_conv_group8` per task, over the task's share of
//! the `N x groups x OH` output rows. The kernel applies bias, residual,
//! clamp and sigmoid/SiLU itself; any other fused ops run afterwards
//! through the generic elementwise epilogue over the whole result (the
//! kernel then does not split).

use super::contraction::{conv_epilogue, ep_desc, f32_buf, i64_buf, FusedEp, RuntimeConvEp};
use super::emit::Emit;
use super::KCtx;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{FuncRef, InstBuilder};
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::group8::{pack_filter, Group8Geom};
use dnnc_runtime::cpu::AlignedBuf;

/// Whether conv `geom` under `algo` runs on the grouped-8 kernel: the
/// `direct` algorithm on a grouped conv of 8-channel groups. The one
/// test the preparation, the superseded-weight check and the lowering
/// share.
pub(crate) fn runs(geom: &ConvGeom, algo: super::contraction::ConvAlgo) -> bool {
    algo == super::contraction::ConvAlgo::Direct && geom.grouped8()
}

/// The geometry descriptor of `geom` that both window kernels
/// (`dnnc_conv_group8`, `dnnc_conv_dw8`) take.
pub(crate) fn descriptor(geom: &ConvGeom) -> Group8Geom {
    Group8Geom {
        c: geom.c,
        h: geom.h,
        w: geom.w,
        oh: geom.oh,
        ow: geom.ow,
        kh: geom.kh,
        kw: geom.kw,
        sh: geom.p.strides[0],
        sw: geom.p.strides[1],
        pt: geom.p.pads[0],
        pl: geom.p.pads[1],
    }
}

/// A window kernel's prepared buffers: its packed filter, then the
/// descriptor `d` (its `usize` fields in order, as the kernels read them).
pub(crate) fn window_buffers(d: &Group8Geom, packed: &[f32]) -> Vec<AlignedBuf> {
    window_buffers_with(d, &[], packed)
}

/// [`window_buffers`] with `extra` fields after the descriptor's (a
/// kernel whose descriptor extends `Group8Geom`, as
/// `IntoBlockedGeom` does with its output channels).
pub(crate) fn window_buffers_with(
    d: &Group8Geom,
    extra: &[usize],
    packed: &[f32],
) -> Vec<AlignedBuf> {
    let fields = [
        d.c, d.h, d.w, d.oh, d.ow, d.kh, d.kw, d.sh, d.sw, d.pt, d.pl,
    ];
    const _: () = assert!(std::mem::size_of::<Group8Geom>() == 11 * 8);
    let all: Vec<i64> = fields.iter().chain(extra).map(|&v| v as i64).collect();
    vec![f32_buf(packed), i64_buf(&all)]
}

/// The prepared buffers: the packed filter, then the descriptor.
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    let d = descriptor(geom);
    if let Some(why) = d.unfit() {
        return Err(why.into());
    }
    Ok(window_buffers(
        &d,
        &pack_filter(w, geom.c, geom.kh * geom.kw),
    ))
}

/// Emits one call of window kernel `f` (`(w, x, y, geo, u0, u1, ep) ->
/// i32`, its buffers as [`window_buffers`] prepared them) over the
/// task's share of `units` units of kind `unit`: the kernel applies the
/// parts of the epilogue `takes` accepts (bias, residual, clamp,
/// sigmoid/SiLU); any other fused ops run afterwards through the generic
/// elementwise epilogue over the whole result (the kernel then does not
/// split). `refusal` describes the kernel's error code 1.
#[allow(clippy::too_many_arguments)]
pub(crate) fn lower_window_call(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
    f: FuncRef,
    (units, unit): (usize, &'static str),
    takes: impl Fn(&FusedEp) -> bool,
    refusal: &str,
) -> Result<Vec<String>, String> {
    if !c.k.prologue.is_empty() {
        return Err("a window kernel's conv takes no prologue".into());
    }
    let node = c.g.node(c.k.nodes[0]);
    let WindowCall {
        wp,
        gp,
        y,
        desc,
        spec,
    } = window_call(e, c, geom, takes)?;
    let x = e.bufs[c.arg(node.inputs[0])?];
    let (lo, hi) = match spec {
        None => e.task_range(units, unit)?,
        Some(_) => (e.ci(0), e.ci(units as i64)),
    };
    let call = e.b.ins().call(f, &[wp, x, y, gp, lo, hi, desc]);
    let rc = e.b.inst_results(call)[0];
    let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
    e.fail_if(bad, 1);
    if let Some(spec) = spec {
        let sub = super::elementwise::SubDomain::full(&spec.domain);
        super::elementwise::emit(e, &spec, &sub)?;
    }
    // Error code 1: the runtime kernel refused the geometry (checked when
    // the filter was prepared, so only a corrupted descriptor reaches it).
    Ok(vec![refusal.to_string()])
}

/// What every call of a window kernel takes, built once per kernel: the
/// packed filter and descriptor ([`window_buffers`]), the result buffer,
/// the fused epilogue's descriptor and the generic epilogue (the ops
/// `takes` leaves to it), if any.
pub(crate) struct WindowCall<'g> {
    /// The packed filter.
    pub wp: cranelift_codegen::ir::Value,
    /// The geometry descriptor.
    pub gp: cranelift_codegen::ir::Value,
    /// The buffer the kernel writes.
    pub y: cranelift_codegen::ir::Value,
    /// The `pgemm::Epilogue` the kernel applies.
    pub desc: cranelift_codegen::ir::Value,
    /// The generic epilogue after it.
    pub spec: Option<super::elementwise::EwSpec<'g>>,
}

/// [`WindowCall`] of window conv kernel `c` (buffers as
/// [`window_buffers`] prepared them, then any the caller adds).
pub(crate) fn window_call<'g>(
    e: &mut Emit<'_>,
    c: &KCtx<'g>,
    geom: &ConvGeom,
    takes: impl Fn(&FusedEp) -> bool,
) -> Result<WindowCall<'g>, String> {
    let RuntimeConvEp {
        acc,
        ep,
        bias,
        res,
        spec,
    } = conv_epilogue(e, c, geom.m, takes)?;
    let desc = ep_desc(e, bias, res.map(|r| (r, (0, 0))), (ep.lo, ep.hi, ep.act));
    Ok(WindowCall {
        wp: e.bufs[*c.prep.first().ok_or("missing packed filter")?],
        gp: e.bufs[*c.prep.get(1).ok_or("missing conv geometry")?],
        y: e.bufs[acc],
        desc,
        spec,
    })
}

/// Emits grouped-8 conv kernel `c`.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    let units = geom.n * geom.g * geom.oh;
    let f = e.group8;
    lower_window_call(
        e,
        c,
        geom,
        f,
        (units, "rows"),
        |_| true,
        "the grouped-8 conv kernel does not compute this geometry",
    )
}
