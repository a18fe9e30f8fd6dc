//! Lowering of window convs into the channel-blocked layout to the
//! runtime kernel `dnnc_conv_into_nchw8c`: one call per task, over the
//! task's share of the `N x OH` output rows. Two kinds: from a plain NCHW
//! input (`data=nchw_to_nchw8c`, which the `block-channels` pass gives
//! the conv feeding a blocked chain from a plain tensor, a 3-channel
//! stem), and the window convs inside a region (`data=nchw8c`,
//! `block_channels::BlockedKernel::Window`: 5x5, 1x7, strided 3x3 ...,
//! and RegNet's grouped 3x3 convs of eight channels a group), which read
//! blocks. The kernel
//! applies bias, residual, clamp and sigmoid/SiLU itself; any other fused
//! ops (elementwise on the blocked result, which the pass guarantees) run
//! afterwards through the generic elementwise epilogue.

use super::emit::Emit;
use super::KCtx;
use dnnc_ir::op::DataLayout;
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::blocked::{into_unfit, pack_filter, pack_grouped_filter, IntoBlockedGeom};
use dnnc_runtime::cpu::AlignedBuf;

/// Whether conv `geom` reads a plain input and writes a blocked result.
pub(crate) fn runs(geom: &ConvGeom) -> bool {
    geom.p.data == DataLayout::NchwToNchw8c
}

/// Output rows (`N x OH`) below which a window conv's tasks split its
/// filter too: a slice per AVX-512 group tile of its rows
/// (`blocked::window_group` panels of 16 channels). ResNet-18's last
/// stage at batch 1 has 7 rows: split 4 + 3 over two threads, its 256 ->
/// 512 stride-2 conv took 0.82 ms against the NCHW GEMM's 0.53.
const SLICED_ROWS: usize = 32;

/// The kernel's geometry descriptor of `geom`.
fn descriptor(geom: &ConvGeom) -> IntoBlockedGeom {
    use dnnc_runtime::cpu::blocked::window_group;
    let mut d = IntoBlockedGeom {
        conv: super::group8::descriptor(geom),
        m: geom.m,
        blocked_input: usize::from(geom.p.data == DataLayout::Nchw8c),
        slices: 1,
        n: geom.n,
        // A grouped conv reaches here only as the pass's blocked grouped
        // window conv: eight channels in and out per group.
        groups: geom.g,
    };
    if geom.n * geom.oh < SLICED_ROWS {
        d.slices = d.panels().div_ceil(window_group(geom.ow));
    }
    d
}

/// Why the pass's rules refuse `geom` in its layout: [`runs`]' convs
/// are stems (`block_channels::unfit_into`), the others blocked convs
/// (`block_channels::unfit`).
fn unfit(geom: &ConvGeom) -> Option<String> {
    if runs(geom) {
        dnnc_passes::block_channels::unfit_into(geom)
    } else {
        dnnc_passes::block_channels::unfit(geom)
    }
}

/// The prepared buffers: the filter packed as an `m x (c kh kw)` matrix
/// in panels (a grouped conv's as one 8-channel panel per group), then
/// the descriptor.
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    if let Some(why) = unfit(geom) {
        return Err(why);
    }
    let d = descriptor(geom);
    if let Some(why) = into_unfit(&d) {
        return Err(format!("data={}: {why}", geom.p.data.name()));
    }
    let packed = if d.groups > 1 {
        pack_grouped_filter(w, geom.m, geom.c / geom.g * geom.kh * geom.kw)
    } else {
        pack_filter(w, geom.m, geom.c * geom.kh * geom.kw)
    };
    const _: () = assert!(std::mem::size_of::<IntoBlockedGeom>() == 16 * 8);
    Ok(super::group8::window_buffers_with(
        &d.conv,
        &[d.m, d.blocked_input, d.slices, d.n, d.groups],
        &packed,
    ))
}

/// Emits window conv kernel `c` into the blocked layout.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    if let Some(why) = unfit(geom) {
        return Err(why);
    }
    let f = e.into8c;
    super::group8::lower_window_call(
        e,
        c,
        geom,
        f,
        (
            descriptor(geom).slices * geom.n * geom.oh,
            "rows x filter slices",
        ),
        |_| true,
        "the conv kernel into the blocked layout does not compute this geometry",
    )
}
