//! Lowering of depthwise convs to the runtime kernel `dnnc_conv_dw8`
//! (channel-interleaved scratch; see its module docs) where it beats the
//! plane kernel (every depthwise conv on AVX-512 machines, large windows
//! on small maps elsewhere: [`wins`]): one call per task, over the task's share of the
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
/// plane kernel ([`wins`]). The one test the preparation, the
/// superseded-weight check and the lowering share.
pub(crate) fn runs(geom: &ConvGeom, algo: ConvAlgo) -> bool {
    algo == ConvAlgo::Depthwise
        && geom.g == geom.c
        && geom.m == geom.c
        && geom.c.is_multiple_of(BLOCK)
        && geom.p.dilations == [1, 1]
        && geom.const_w
        && geom.p.data == dnnc_ir::op::DataLayout::Nchw
        && wins(geom)
}

/// Fewest filter taps for which the interleaved kernel runs on a core
/// without full-width 256-bit FMA units.
const MIN_TAPS: usize = 25;

/// Most output columns for which the interleaved kernel runs on such a
/// core.
const MAX_COLS: usize = 28;

/// Whether the interleaved kernel beats the plane kernel on `geom`.
///
/// On a core whose 256-bit FMAs run at full width (every AVX-512 core:
/// AMD Zen 4, Intel Xeon) the interleaved kernel's ymm FMAs do twice the
/// work of the plane kernel's generated f32x4 ones, and it wins on every
/// depthwise conv: EfficientNet-B0 at batch 8, one thread, Zen 4, with
/// SiLU: its 3x3 convs 0.55-0.75 of the plane kernel's time (32 channels
/// on 112x112 3.85 -> 2.89 ms, 96 channels stride 2 from 112x112 6.80 ->
/// 3.73, 240 channels on 14x14 1.12 -> 0.70).
///
/// On the AMD EPYC Zen 1 (AVX2 on 128-bit units) it wins only with
/// windows of at least [`MIN_TAPS`] taps on maps of at most [`MAX_COLS`]
/// output columns: EfficientNet-B0's 5x5 convs on 28x28 to 7x7 outputs
/// 0.80-0.90 of the plane kernel's time (7x7: 2.93 -> 2.38 ms, 14x14:
/// 5.95 -> 5.35, 28x28: 7.11 -> 6.34, stride 2 from 56x56: 5.90 ->
/// 4.88), its 3x3 convs 1.08-1.36 of it (the plane kernel keeps a 3x3
/// window's taps and the epilogue in registers; there the copies in and
/// out weigh more against 9 taps than 25). Cores with AVX2 alone keep
/// that rule (Zen 2 and 3 have full-width units but are unmeasured).
fn wins(geom: &ConvGeom) -> bool {
    dnnc_runtime::cpu::pgemm::Kernel::best() == dnnc_runtime::cpu::pgemm::Kernel::Avx512
        || large_window_small_map(geom)
}

/// The rule for cores without full-width 256-bit FMAs (see [`wins`]).
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
