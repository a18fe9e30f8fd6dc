//! Lowering of depthwise convs with large windows on small maps to the
//! runtime kernel `dnnc_conv_dw8` (channel-interleaved scratch; see its
//! module docs): one call per task, over the task's share of the
//! `N x C/8` channel blocks. The kernel applies bias, clamp and sigmoid/SiLU itself; a
//! residual and any other fused ops run afterwards through the generic
//! elementwise epilogue over the whole result (the kernel then does not
//! split).

use super::contraction::ConvAlgo;
use super::emit::Emit;
use super::KCtx;
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::dw8::{pack_filter, unfit, BLOCK};
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

/// The prepared buffers: the packed filter, then the descriptor.
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    let d = super::group8::descriptor(geom);
    if let Some(why) = unfit(&d) {
        return Err(why.into());
    }
    Ok(super::group8::window_buffers(
        &d,
        &pack_filter(w, geom.c, geom.kh * geom.kw),
    ))
}

/// Emits interleaved depthwise conv kernel `c`: no residual in the
/// kernel, so it and what follows it go to the generic epilogue.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    let units = geom.n * geom.c / BLOCK;
    let f = e.dw8;
    super::group8::lower_window_call(
        e,
        c,
        geom,
        f,
        (units, "channel blocks"),
        |f| f.res.is_none(),
        "the interleaved depthwise conv kernel does not compute this geometry",
    )
}
