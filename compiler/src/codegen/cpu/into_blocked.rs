//! Lowering of convs from a plain NCHW input into the channel-blocked
//! layout (`data=nchw_to_nchw8c`, which the `block-channels` pass gives
//! the conv feeding a blocked chain from a plain tensor, a 3-channel
//! stem) to the runtime kernel `dnnc_conv_into_nchw8c`: one call per
//! task, over the task's share of the `N x OH` output rows. The kernel
//! applies bias, residual, clamp and sigmoid/SiLU itself; any other fused
//! ops (elementwise on the blocked result, which the pass guarantees) run
//! afterwards through the generic elementwise epilogue.

use super::emit::Emit;
use super::KCtx;
use dnnc_ir::op::DataLayout;
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::blocked::{into_unfit, pack_filter, IntoBlockedGeom, INTO_MAX_TAPS};
use dnnc_runtime::cpu::AlignedBuf;

/// Whether conv `geom` reads a plain input and writes a blocked result.
pub(crate) fn runs(geom: &ConvGeom) -> bool {
    geom.p.data == DataLayout::NchwToNchw8c
}

const _: () = assert!(INTO_MAX_TAPS == dnnc_passes::block_channels::INTO_MAX_TAPS);

/// The kernel's geometry descriptor of `geom`.
fn descriptor(geom: &ConvGeom) -> IntoBlockedGeom {
    IntoBlockedGeom {
        conv: super::group8::descriptor(geom),
        m: geom.m,
    }
}

/// The prepared buffers: the filter packed as an `m x (c kh kw)` matrix
/// in panels, then the descriptor.
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    if let Some(why) = dnnc_passes::block_channels::unfit_into(geom) {
        return Err(why);
    }
    let d = descriptor(geom);
    if let Some(why) = into_unfit(&d) {
        return Err(format!("data=nchw_to_nchw8c: {why}"));
    }
    let packed = pack_filter(w, geom.m, geom.c * geom.kh * geom.kw);
    const _: () = assert!(std::mem::size_of::<IntoBlockedGeom>() == 12 * 8);
    Ok(super::group8::window_buffers_with(&d.conv, &[d.m], &packed))
}

/// Emits conv kernel `c` into the blocked layout.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    if let Some(why) = dnnc_passes::block_channels::unfit_into(geom) {
        return Err(why);
    }
    let f = e.into8c;
    super::group8::lower_window_call(
        e,
        c,
        geom,
        f,
        (geom.n * geom.oh, "rows"),
        |_| true,
        "the conv kernel into the blocked layout does not compute this geometry",
    )
}
