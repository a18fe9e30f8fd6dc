//! Lowering of depthwise convs with large windows on small maps to the
//! runtime kernel `dnnc_conv_dw8` (channel-interleaved scratch; see its
//! module docs): one call per task, over the task's share of the
//! `N x C/8` channel blocks. The kernel applies bias, clamp and sigmoid/SiLU itself; a
//! residual and any other fused ops run afterwards through the generic
//! elementwise epilogue over the whole result (the kernel then does not
//! split).

use super::contraction::{conv_epilogue, ep_desc, f32_buf, i64_buf, ConvAlgo, RuntimeConvEp};
use super::emit::Emit;
use super::KCtx;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::InstBuilder;
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::dw8::{pack_filter, unfit, BLOCK};
use dnnc_runtime::cpu::group8::Group8Geom;
use dnnc_runtime::cpu::AlignedBuf;

/// Whether conv `geom` under `algo` runs on the interleaved kernel: the
/// `depthwise` algorithm on an undilated depthwise conv of whole 8-channel
/// blocks with a compile-time filter, where it measured faster than the
/// plane kernel ([`large_window_small_map`]). The one test the preparation, the
/// superseded-weight check and the lowering share.
pub(crate) fn runs(geom: &ConvGeom, algo: ConvAlgo) -> bool {
    algo == ConvAlgo::Depthwise
        && geom.g == geom.c
        && geom.m == geom.c
        && geom.c.is_multiple_of(BLOCK)
        && geom.p.dilations == [1, 1]
        && geom.const_w
        && geom.p.data == dnnc_ir::op::DataLayout::Nchw
        && large_window_small_map(geom)
}

/// Fewest filter taps for which the interleaved kernel runs.
const MIN_TAPS: usize = 25;

/// Most output columns for which the interleaved kernel runs.
const MAX_COLS: usize = 28;

/// Whether the interleaved kernel beats the plane kernel on `geom`:
/// windows of at least [`MIN_TAPS`] taps on maps of at most [`MAX_COLS`]
/// output columns. Measured on EfficientNet-B0 at batch 8, one thread
/// (AMD EPYC; per layer, with SiLU): its 5x5 convs on 28x28 to 7x7
/// outputs 0.80-0.90 of the plane kernel's time (7x7: 2.93 -> 2.38 ms,
/// 14x14: 5.95 -> 5.35, 28x28: 7.11 -> 6.34, stride 2 from 56x56: 5.90
/// -> 4.88), its 3x3 convs 1.08-1.36 of it (the plane kernel keeps a
/// 3x3 window's taps and the epilogue in registers; here the copies in
/// and out weigh more against 9 taps than 25).
fn large_window_small_map(geom: &ConvGeom) -> bool {
    geom.kh * geom.kw >= MIN_TAPS && geom.ow <= MAX_COLS
}

/// The kernel's geometry descriptor for `geom`.
fn descriptor(geom: &ConvGeom) -> Group8Geom {
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

/// The prepared buffers: the packed filter, then the descriptor (its
/// `usize` fields in order, as the kernel reads them).
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    let d = descriptor(geom);
    if let Some(why) = unfit(&d) {
        return Err(why.into());
    }
    let fields = [
        d.c, d.h, d.w, d.oh, d.ow, d.kh, d.kw, d.sh, d.sw, d.pt, d.pl,
    ];
    Ok(vec![
        f32_buf(&pack_filter(w, geom.c, geom.kh * geom.kw)),
        i64_buf(&fields.map(|v| v as i64)),
    ])
}

/// Emits interleaved depthwise conv kernel `c`.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    if !c.k.prologue.is_empty() {
        return Err("a depthwise conv takes no prologue".into());
    }
    let node = c.g.node(c.k.nodes[0]);
    // No residual in the kernel: it and what follows it go to the
    // generic epilogue.
    let RuntimeConvEp {
        acc,
        ep,
        bias,
        res: _,
        spec,
    } = conv_epilogue(e, c, geom.m, |f| f.res.is_none())?;
    let desc = ep_desc(e, bias, None, (ep.lo, ep.hi, ep.act));
    let wp = e.bufs[*c.prep.first().ok_or("missing packed depthwise filter")?];
    let gp = e.bufs[*c.prep.get(1).ok_or("missing depthwise conv geometry")?];
    let x = e.bufs[c.arg(node.inputs[0])?];
    let y = e.bufs[acc];
    let units = geom.n * geom.c / BLOCK;
    let (lo, hi) = match spec {
        None => e.task_range(units, "channel blocks")?,
        Some(_) => (e.ci(0), e.ci(units as i64)),
    };
    let f = e.dw8;
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
    Ok(vec![
        "the interleaved depthwise conv kernel does not compute this geometry".to_string(),
    ])
}
