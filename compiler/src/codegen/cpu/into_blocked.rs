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
use dnnc_runtime::cpu::blocked::{
    gather_unfit, into_unfit, pack_filter, pack_grouped_filter, IntoBlockedGeom,
};
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

/// Whether window conv `geom` inside a blocked region runs gathered
/// (`dnnc_conv_gather_nchw8c`: the input pixels under each piece of
/// output pixels copied into a dense blocked map, then the pointwise
/// conv's tiles) instead of through the window kernel's row tiles: a
/// strided 1x1 conv of one group (a projection). Both give the same
/// bits. `window_blocked` at batch 8 (`GATHER=1` against not, 2-3 runs
/// each), ResNet-50's stride-2 projections: 1024 -> 2048 on 14x14 28.9
/// -> 18.1 ms, 512 -> 1024 on 28x28 24.6 -> 19.4, 256 -> 512 on 56x56
/// 22.2 -> 19.8; at batch 1 256 -> 512 on 14x14 0.25-0.27 -> 0.15-0.17,
/// 128 -> 256 on 28x28 0.154 -> 0.139, 64 -> 128 on 56x56 equal.
/// Windows of more taps stay with the window kernel: gathered with each
/// block eight channels of one tap, 3x3 stride-2 and 7x1 convs ran
/// 5-15% faster but summed in another order (a deep test chain then
/// missed the interpreter's bound on one element); gathered a float at
/// a time in the window kernel's order, the 7x1 ran 14.5 -> 18.7 ms.
pub(crate) fn gathers(geom: &ConvGeom) -> bool {
    geom.p.data == DataLayout::Nchw8c
        && geom.g == 1
        && geom.kh == 1
        && geom.kw == 1
        && geom.p.strides != [1, 1]
}

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
    // A gathered conv splits small maps by filter panels itself.
    if geom.n * geom.oh < SLICED_ROWS && !gathers(geom) {
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
/// in panels (a grouped conv's as one 8-channel panel per group; a
/// [`gathers`] conv reads the same), then the descriptor.
pub(crate) fn prepared(geom: &ConvGeom, w: &[f32]) -> Result<Vec<AlignedBuf>, String> {
    if let Some(why) = unfit(geom) {
        return Err(why);
    }
    let d = descriptor(geom);
    let why = if gathers(geom) {
        gather_unfit(&d)
    } else {
        into_unfit(&d)
    };
    if let Some(why) = why {
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
