//! Lowering of channel-blocked convolutions (`data=nchw8c`, placed by the
//! `block-channels` pass): the pointwise conv calls the blocked GEMM
//! kernel (`dnnc_runtime::cpu::blocked`), the depthwise conv the row
//! kernel (`dnnc_runtime::cpu::dwrow`: eight channels of a pixel one ymm
//! vector, one FMA per tap), once per task, or once per output row inside
//! a fused inverted-residual block. Both split over output rows (`image x
//! channel block x row` for the depthwise conv) and apply bias, residual
//! and clamp in their
//! own epilogue (the pointwise conv sigmoid and SiLU too); other fused
//! ops (all elementwise on the blocked result, which the pass
//! guarantees) run after each row through the generic elementwise
//! epilogue.

use super::contraction::{
    acc_arg, conv_epilogue, ep_desc, epilogue, f32_buf, match_fused, match_fused_in, RuntimeConvEp,
};
use super::elementwise::{self, SubDomain};
use super::emit::Emit;
use super::group::Kernel;
use super::KCtx;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{InstBuilder, StackSlotData, StackSlotKind, Value};
use dnnc_ir::op::DataLayout;
use dnnc_ir::{DType, Graph};
use dnnc_passes::block_channels::BlockedKernel;
use dnnc_passes::ConvGeom;
use dnnc_runtime::cpu::{blocked, dwrow, pgemm, AlignedBuf};

/// Channels per block.
const B: usize = DataLayout::BLOCK;

/// Pixels per task unit of a pointwise conv split by pixels: whole tiles
/// of every AVX2 panel width (5 and 3 pixels,
/// `dnnc_runtime::cpu::blocked`'s tiles since they stopped spilling).
const PIXEL_GROUP: usize = 15;

/// Whether conv `geom` runs on channel-blocked data.
pub(crate) fn is_blocked(geom: &ConvGeom) -> bool {
    geom.p.data == DataLayout::Nchw8c
}

/// Whether blocked conv `geom` is the pointwise kind (else depthwise or
/// a window conv, which lowers in `into_blocked`; the blocked Winograd
/// convs lower in `fastconv`).
fn pointwise(geom: &ConvGeom) -> bool {
    kernel(geom) == Some(BlockedKernel::Pointwise)
}

/// The residual a blocked pointwise conv kernel may write its result
/// over: the fused epilogue's (`match_fused`) residual, read by no other
/// node of the kernel and not its input. The kernel reads each residual
/// vector at the offset of the output vector it then writes (the
/// residual has the output's type and blocked layout, addressed as it),
/// and its tiles take every input channel in one pass when the two are
/// one buffer (`blocked::k_step`), so no element is read after its
/// output overwrote it. The memory planner places the result over the
/// residual where that dies here: a batch-8 ResNet-50 expansion then
/// writes lines it just read instead of fetching fresh ones
/// (`nchwc_pointwise` with a residual: 256 x 3136 x 64 at batch 8
/// 9.9-10.2 -> 9.3-9.5 ms).
pub(crate) fn residual_in_place(g: &Graph, k: &Kernel) -> Option<dnnc_ir::ValueId> {
    let conv = g.node(*k.nodes.first()?);
    if !matches!(conv.op, dnnc_ir::Op::Conv2d(_))
        || !k.expansion.is_empty()
        || !k.projection.is_empty()
        || !k.prologue.is_empty()
        || !k.pool.is_empty()
        || k.concat.is_some()
        || k.outputs.len() != 1
        || super::contraction::needs_acc_ws(g, k)
    {
        return None;
    }
    let geom = ConvGeom::of_node(g, k.nodes[0]).ok()?;
    if !is_blocked(&geom) || !pointwise(&geom) {
        return None;
    }
    let bias = conv.inputs.get(2).copied();
    let r = match_fused_in(g, k, bias)?.res?;
    let readers = k
        .all_nodes()
        .filter(|&&n| g.node(n).inputs.contains(&r))
        .count();
    let out = k.outputs[0];
    (readers == 1 && !conv.inputs.contains(&r) && g.value(r).ty == g.value(out).ty).then_some(r)
}

/// Which blocked kernel conv `geom` runs as.
fn kernel(geom: &ConvGeom) -> Option<BlockedKernel> {
    dnnc_passes::block_channels::blocked_kernel(geom)
}

/// The weights a blocked conv kernel takes prepared: the packed filter
/// (pointwise, [`blocked::pack_filter`]), the taps per block,
/// `[C/8][kh * kw][8]`, then a row of zeros as wide as an input row,
/// which a depthwise conv reads for padding rows (depthwise), or a
/// window conv's packed filter and descriptor
/// (`into_blocked::prepared`); then its expansion's packed filter if it
/// has one.
pub(crate) fn prepared(g: &Graph, k: &Kernel, geom: &ConvGeom) -> Result<Vec<AlignedBuf>, String> {
    if let Some(why) = dnnc_passes::block_channels::unfit(geom) {
        return Err(why);
    }
    let w = filter(g, k.nodes[0])?;
    let mut prep = if kernel(geom) == Some(BlockedKernel::Window) {
        super::into_blocked::prepared(geom, &w)?
    } else if pointwise(geom) {
        return Ok(vec![f32_buf(&blocked::pack_filter(&w, geom.m, geom.c))]);
    } else {
        depthwise_prepared(geom, &w)
    };
    for (part, what) in [(&k.expansion, "expansion"), (&k.projection, "projection")] {
        if let Some(&pw) = part.first() {
            let pgeom = ConvGeom::of_node(g, pw)?;
            if let Some(why) = dnnc_passes::block_channels::unfit(&pgeom) {
                return Err(format!("{what}: {why}"));
            }
            let pwf = filter(g, pw)?;
            prep.push(f32_buf(&blocked::pack_filter(&pwf, pgeom.m, pgeom.c)));
        }
    }
    Ok(prep)
}

/// Conv `node`'s filter, as f32s in order.
fn filter(g: &Graph, node: dnnc_ir::NodeId) -> Result<Vec<f32>, String> {
    let wt = g
        .weight(g.node(node).inputs[1])
        .map_err(|e| format!("filter: {e}"))?;
    let dnnc_ir::Tensor::F32(wt) = wt.as_ref() else {
        return Err("filter must be f32".into());
    };
    Ok(wt.iter().copied().collect())
}

/// A depthwise conv's taps per block and its zero row.
fn depthwise_prepared(geom: &ConvGeom, w: &[f32]) -> Vec<AlignedBuf> {
    let taps = geom.kh * geom.kw;
    let mut out = vec![0f32; geom.c * taps];
    for ch in 0..geom.c {
        for t in 0..taps {
            out[(ch / B) * taps * B + t * B + ch % B] = w[ch * taps + t];
        }
    }
    vec![f32_buf(&out), f32_buf(&vec![0f32; geom.w * B])]
}

/// Emits blocked conv kernel `c`.
pub(crate) fn lower(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    geom: &ConvGeom,
) -> Result<Vec<String>, String> {
    if let Some(why) = dnnc_passes::block_channels::unfit(geom) {
        return Err(why);
    }
    if !c.k.expansion.is_empty() && grouped_window(geom) {
        return lower_group_rows(e, c, geom).map(|()| vec![GROUP_RING_REFUSAL.to_string()]);
    }
    if !c.k.expansion.is_empty() {
        return lower_rows(e, c, geom).map(|()| vec![ROW_REFUSAL.to_string()]);
    }
    let gathers = super::into_blocked::gathers(geom);
    if kernel(geom) == Some(BlockedKernel::Window) && !gathers {
        return super::into_blocked::lower(e, c, geom);
    }
    if gathers && !c.k.prologue.is_empty() {
        return Err("a gathered strided 1x1 conv takes no prologue".into());
    }
    let node = c.g.node(c.k.nodes[0]);
    // The fused epilogue when the kernel's ops fit it (bias, residual,
    // clamp, sigmoid or SiLU in registers; other activations run through
    // the generic epilogue).
    let RuntimeConvEp {
        acc,
        ep,
        bias,
        res,
        spec,
    } = conv_epilogue(e, c, geom.m, |_| true)?;
    let y = e.bufs[acc];
    let wp = e.bufs[*c.prep.first().ok_or("missing blocked filter")?];
    // A gathered strided 1x1 conv runs the pointwise conv's tiles over
    // the input pixels it copies, split as a pointwise conv is.
    if pointwise(geom) || gathers {
        let x = e.bufs[c.arg(node.inputs[0])?];
        let desc = ep_desc(e, bias, res.map(|r| (r, (0, 0))), (ep.lo, ep.hi, ep.act));
        let (ow, hw) = (geom.ow as i64, geom.oh * geom.ow);
        let pixels = geom.n * hw;
        let depth = geom.c * geom.kh * geom.kw;
        let panels = blocked::panel_count(geom.m);
        let geo = match gathers {
            true => Some(e.bufs[*c.prep.get(1).ok_or("missing conv geometry")?]),
            false => None,
        };
        let call = |e: &mut Emit<'_>, (q0, q1): (Value, Value), (n0, n1): (Value, Value)| {
            if let Some(geo) = geo {
                let f = e.gather8c;
                call_checked(e, f, &[wp, x, y, geo, q0, q1, n0, n1, desc]);
                return;
            }
            let args = [
                wp,
                e.ci(geom.c as i64),
                e.ci(geom.m as i64),
                x,
                y,
                e.ci(hw as i64),
                q0,
                q1,
                n0,
                n1,
                desc,
            ];
            let f = e.conv8c;
            call_checked(e, f, &args);
        };
        match &spec {
            // A map whose input fits L2 splits by filter panels, a larger
            // one by groups of pixel tiles.
            None if blocked::whole_map(pixels, depth, geom.m) && panels > 1 => {
                let (lo, hi) = e.task_range(panels, "filter panels")?;
                let all = (e.ci(0), e.ci(pixels as i64));
                call(e, all, (lo, hi));
            }
            None => {
                let groups = pixels.div_ceil(PIXEL_GROUP);
                let (lo, hi) = e.task_range(groups, "15-pixel groups")?;
                let q0 = e.b.ins().imul_imm_s(lo, PIXEL_GROUP as i64);
                let q1 = e.b.ins().imul_imm_s(hi, PIXEL_GROUP as i64);
                let end = e.ci(pixels as i64);
                let q1 = e.b.ins().smin(q1, end);
                let all = (e.ci(0), e.ci(panels as i64));
                call(e, (q0, q1), all);
            }
            Some(spec) => {
                let (lo, hi) = e.task_range(geom.n * geom.oh, "rows")?;
                let mut err = Ok(());
                e.for_range(lo, hi, 1, |e, r| {
                    let q0 = e.b.ins().imul_imm_s(r, ow);
                    let q1 = e.b.ins().iadd_imm_s(q0, ow);
                    let all = (e.ci(0), e.ci(panels as i64));
                    call(e, (q0, q1), all);
                    if err.is_ok() {
                        err = row_epilogue(e, spec, geom, r, None);
                    }
                });
                err?;
            }
        }
        // Error code 1: the runtime kernel refused the geometry (checked
        // when the filter was prepared).
        return Ok(match gathers {
            true => vec!["the gathered 1x1 conv kernel does not compute this geometry".into()],
            false => Vec::new(),
        });
    }
    let zero_row = e.bufs[*c.prep.get(1).ok_or("missing padding row")?];
    let cb = geom.c / B;
    let x = e.bufs[c.arg(node.inputs[0])?];
    let call = dw_call(e, geom, (ep.lo, ep.hi, ep.act), (0, 0), zero_row);
    // Units are `(img * C/8 + blk) * OH + oy`: a task walks a block's
    // rows in order, each reading the previous row's tap rows again from
    // L1. One call for the task's rows; with a generic epilogue (an
    // activation the kernel does not apply), one call per row, each row
    // then finished while it is in cache.
    let (lo, hi) = e.task_range(geom.n * geom.oh * cb, "rows")?;
    let null = e.ci(0);
    let (res, bias) = (res.unwrap_or(null), bias.unwrap_or(null));
    let f = e.dw8c;
    let mut err = Ok(());
    match &spec {
        None => call_checked(e, f, &[x, wp, y, res, bias, call.geo, lo, hi]),
        Some(spec) => e.for_range(lo, hi, 1, |e, u| {
            let next = e.b.ins().iadd_imm_s(u, 1);
            call_checked(e, f, &[x, wp, y, res, bias, call.geo, u, next]);
            if err.is_ok() {
                err = row_epilogue(e, spec, geom, u, Some(cb));
            }
        }),
    }
    err?;
    Ok(vec![ROW_REFUSAL.to_string()])
}

/// Error code 1 of a blocked depthwise kernel: a runtime kernel refused
/// the geometry (checked when the kernel was lowered, so only a corrupted
/// descriptor reaches it).
const ROW_REFUSAL: &str =
    "the channel-blocked depthwise row or pointwise band kernel refused its geometry";

/// A blocked depthwise kernel `c` with an expansion (and maybe a
/// projection, which [`takes_projection`] only gives such a kernel),
/// walking its task's share of the `N x OH` output rows in order: each
/// row's new tap rows expanded into the ring, the row of every channel
/// block computed, then either
/// stored with the depthwise conv's epilogue or, with a projection, kept
/// in a scratch row that the projection turns into the same row of its
/// output (bias, residual and clamp in its epilogue).
fn lower_rows(e: &mut Emit<'_>, c: &KCtx<'_>, geom: &ConvGeom) -> Result<(), String> {
    let g = c.g;
    let node = g.node(c.k.nodes[0]);
    let bias_v = node.inputs.get(2).copied();
    if let Some(b) = bias_v {
        let t = &g.value(b).ty;
        if t.dtype != DType::F32 || t.shape != [geom.m] {
            return Err(format!("bias must be f32[{}]", geom.m));
        }
    }
    let bias = match bias_v {
        Some(v) => Some(e.bufs[c.arg(v)?]),
        None => None,
    };
    // The depthwise conv's own epilogue: a clamp and activation in
    // registers, else (without a projection) the generic epilogue on each
    // row.
    let none = (f32::NEG_INFINITY, f32::INFINITY, pgemm::ACT_NONE);
    let (y, spec, (lo, hi, act)) = if c.k.projection.is_empty() {
        let acc = acc_arg(c)?;
        let fused = match_fused(c, bias_v).filter(|f| f.res.is_none());
        let spec = if fused.is_some() {
            None
        } else {
            epilogue(c, acc, None)?
        };
        let ep = fused.map_or(none, |f| (f.lo, f.hi, f.act));
        (Some(e.bufs[acc]), spec, ep)
    } else {
        let (lo, hi) = super::group::clamp_after(g, c.k.nodes[0], &c.k.nodes[1..])
            .ok_or("a projected depthwise conv takes at most a clamp")?;
        (None, None, (lo, hi, pgemm::ACT_NONE))
    };
    let wp = e.bufs[*c.prep.first().ok_or("missing blocked filter")?];
    let zero_row = e.bufs[*c.prep.get(1).ok_or("missing padding row")?];
    // Block `b`'s output row: `b` rows into the scratch row, or `b`
    // planes on.
    let y_block = if c.k.projection.is_empty() {
        geom.oh * geom.ow
    } else {
        geom.ow
    };
    let call = dw_call(
        e,
        geom,
        (lo, hi, act),
        (geom.kh * geom.w * B, y_block * B),
        zero_row,
    );
    let cb = geom.c / B;
    let mut ws = c.ws.iter().copied();
    let a = ws.next().ok_or("missing expansion ring")?;
    let ring = e.task_slice(a, e.bufs[a], ring_bytes(geom));
    let row = if c.k.projection.is_empty() {
        None
    } else {
        let a = ws.next().ok_or("missing projection row")?;
        Some(e.task_slice(a, e.bufs[a], row_bytes(geom)))
    };
    let exp = expansion(e, c, geom)?;
    let layout = RingLayout {
        slot_bytes: geom.w * B * 4,
        column_bytes: 0,
        block_floats: geom.kh * geom.w * B,
    };
    let proj = match row {
        Some(_) => Some(projection(e, c, geom)?),
        None => None,
    };
    let (lo_u, hi_u) = e.task_range(geom.n * geom.oh, "rows")?;
    let mut err = Ok(());
    e.for_range(lo_u, hi_u, 1, |e, r| {
        expand_rows(e, geom, &exp, ring, (r, lo_u), &layout);
        let img = e.b.ins().udiv_imm_u(r, geom.oh as i64);
        let t = e.b.ins().imul_imm_s(img, geom.oh as i64);
        let oy = e.b.ins().isub(r, t);
        // Each tap row's offset in its block of the ring, and whether it
        // falls in the padding.
        let mut taps = Vec::with_capacity(geom.kh);
        for ky in 0..geom.kh {
            let (iy, out) = tap_row(e, geom, oy, ky);
            let slot = e.b.ins().urem_imm_u(iy, geom.kh as i64);
            let off = e.b.ins().imul_imm_s(slot, (geom.w * B * 4) as i64);
            taps.push((off, out));
        }
        let rows: Vec<Value> = taps
            .iter()
            .map(|&(off, out)| {
                let p = e.b.ins().iadd(ring, off);
                e.b.ins().select(out, zero_row, p)
            })
            .collect();
        // Block 0's output row: the scratch row's first, or row `oy` of
        // the image's first plane.
        let plane0 = e.b.ins().imul_imm_s(img, cb as i64);
        let dst = match (row, y) {
            (Some(row), _) => row,
            (None, Some(y)) => {
                let t = e.b.ins().imul_imm_s(plane0, geom.oh as i64);
                let u = e.b.ins().iadd(t, oy);
                let off = e.b.ins().imul_imm_s(u, (geom.ow * B * 4) as i64);
                e.b.ins().iadd(y, off)
            }
            (None, None) => unreachable!("an output or a scratch row"),
        };
        let all = (e.ci(0), e.ci(cb as i64));
        call_rows(e, &call, &rows, (wp, dst, None, bias), all);
        if let Some(spec) = &spec {
            let s0 = e.ci(0);
            let s1 = e.ci(cb as i64);
            e.for_range(s0, s1, 1, |e, blk| {
                // Unit `(img * C/8 + blk) * OH + oy` of the output rows.
                let plane = e.b.ins().iadd(plane0, blk);
                let t = e.b.ins().imul_imm_s(plane, geom.oh as i64);
                let u = e.b.ins().iadd(t, oy);
                if err.is_ok() {
                    err = row_epilogue(e, spec, geom, u, Some(cb));
                }
            });
        }
        if let (Some(p), Some(row)) = (&proj, row) {
            project_row(e, geom, p, row, (img, oy));
        }
    });
    err
}

/// Error code 1 of a grouped window conv with a fused expansion.
const GROUP_RING_REFUSAL: &str =
    "the grouped window conv's ring kernel or pointwise band kernel refused its geometry";

/// A blocked grouped window conv `c` with an expansion (RegNet's 1x1
/// conv and the grouped 3x3 conv it feeds, as one kernel), walking its
/// task's share of the `N x OH` output rows in order: each row's new
/// window rows expanded into the task's ring (zeroed once, so the
/// padding columns and the last slot, the rows in the padding, stay
/// zero), then the row of every group computed from the ring
/// (`blocked::dnnc_conv_group_ring_nchw8c`) with the conv's epilogue,
/// or the generic epilogue on the row after it. The expanded map never
/// goes to memory, and the conv reads its windows in place instead of
/// copying each row's with its padding.
fn lower_group_rows(e: &mut Emit<'_>, c: &KCtx<'_>, geom: &ConvGeom) -> Result<(), String> {
    let super::group8::WindowCall {
        wp,
        gp,
        y,
        desc,
        spec,
    } = super::group8::window_call(e, c, geom, |_| true)?;
    let bytes = ring_bytes(geom);
    let a = *c.ws.first().ok_or("missing expansion ring")?;
    let ring = e.task_slice(a, e.bufs[a], bytes);
    let cfg = e.cfg;
    let zero = e.b.ins().iconst(cranelift_codegen::ir::types::I8, 0);
    let len = e.ci(bytes as i64);
    e.b.call_memset(cfg, ring, zero, len);
    let exp = expansion(e, c, geom)?;
    let width = blocked::group_ring_width(&super::group8::descriptor(geom));
    let layout = RingLayout {
        slot_bytes: width * B * 4,
        column_bytes: geom.p.pads[1] * B * 4,
        block_floats: (geom.kh + 1) * width * B,
    };
    let ss = e.b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (geom.kh * 8) as u32,
        3,
    ));
    let slots = e.b.ins().stack_addr(I64, ss, 0);
    let (lo_u, hi_u) = e.task_range(geom.n * geom.oh, "rows")?;
    let f = e.group_ring8c;
    let mut err = Ok(());
    e.for_range(lo_u, hi_u, 1, |e, r| {
        expand_rows(e, geom, &exp, ring, (r, lo_u), &layout);
        let img = e.b.ins().udiv_imm_u(r, geom.oh as i64);
        let t = e.b.ins().imul_imm_s(img, geom.oh as i64);
        let oy = e.b.ins().isub(r, t);
        // Each window row's slot, or the zero row's where it falls in the
        // padding.
        for ky in 0..geom.kh {
            let (iy, out) = tap_row(e, geom, oy, ky);
            let slot = e.b.ins().urem_imm_u(iy, geom.kh as i64);
            let zero_slot = e.ci(geom.kh as i64);
            let slot = e.b.ins().select(out, zero_slot, slot);
            e.b.ins()
                .store(super::emit::mem(), slot, slots, (ky * 8) as i32);
        }
        call_checked(e, f, &[wp, ring, slots, y, gp, r, desc]);
        if let Some(spec) = &spec {
            if err.is_ok() {
                err = row_epilogue(e, spec, geom, r, None);
            }
        }
    });
    err
}

/// Bytes of one task's scratch row of a projected depthwise conv `geom`:
/// one output row of every channel block, `[C/8][OW][8]`.
pub(crate) fn row_bytes(geom: &ConvGeom) -> usize {
    geom.c * geom.ow * 4
}

/// Whether blocked conv kernel `k` takes a projection
/// ([`super::group::absorb_projections`]): a depthwise conv with a fused
/// expansion (so a whole inverted residual block becomes one kernel) and
/// at most a clamp after it. Without an expansion (MobileNet-V2's first
/// block, 32 channels of 112x112) the projected row walk measured 3-8%
/// slower than the two kernels; with one, blocks 2 and 3 0.98-0.99 and
/// 0.93-0.96 of the kernels without projection (one thread, medians of 7
/// and 9 alternating profiles).
pub(crate) fn takes_projection(g: &Graph, k: &Kernel) -> bool {
    fusable_depthwise(g, k).is_some()
        && !k.expansion.is_empty()
        && super::group::clamp_after(g, k.nodes[0], &k.nodes[1..]).is_some()
}

/// The geometry of kernel `k`'s anchor if it is a depthwise conv with a
/// blocked kernel and no prologue: what a fused expansion or projection
/// can join. (A blocked Winograd conv is neither pointwise nor unfit but
/// takes no expansion: counted as one, it left a ≥ 1 MiB pointwise
/// result feeding it without a buffer.)
fn fusable_depthwise(g: &Graph, k: &Kernel) -> Option<ConvGeom> {
    use dnnc_passes::block_channels::blocked_kernel;
    let geom = ConvGeom::of_node(g, k.nodes[0]).ok()?;
    let fits = is_blocked(&geom)
        && blocked_kernel(&geom) == Some(BlockedKernel::Depthwise)
        && dnnc_passes::block_channels::unfit(&geom).is_none()
        && k.prologue.is_empty();
    fits.then_some(geom)
}

/// Whether blocked conv `geom` is a grouped window conv (eight channels
/// in and out a group, RegNet's 3x3 convs), whose fused expansion's rows
/// [`lower_group_rows`] computes it from.
fn grouped_window(geom: &ConvGeom) -> bool {
    geom.g > 1
        && is_blocked(geom)
        && kernel(geom) == Some(BlockedKernel::Window)
        && !super::into_blocked::gathers(geom)
}

/// The geometry of kernel `k`'s anchor if it is a grouped window conv
/// ([`grouped_window`]) the pass accepts, with no prologue: what a fused
/// expansion can join (a projection cannot: the squeeze-excitation of
/// RegNet's blocks sits between the grouped conv and the next 1x1).
fn fusable_grouped(g: &Graph, k: &Kernel) -> Option<ConvGeom> {
    let geom = ConvGeom::of_node(g, k.nodes[0]).ok()?;
    let fits = grouped_window(&geom)
        && dnnc_passes::block_channels::unfit(&geom).is_none()
        && k.prologue.is_empty();
    fits.then_some(geom)
}

/// A fused projection's operands in generated code.
struct Projection {
    /// Its packed filter.
    w: Value,
    /// Output channels.
    m: usize,
    /// Its output, `[N, m/8, OH, OW, 8]`.
    y: Value,
    /// Its bias, if any.
    bias: Option<Value>,
    /// Its residual (the output's layout), if any.
    res: Option<Value>,
    lo: f32,
    hi: f32,
}

/// The projection of kernel `c` (a blocked depthwise conv `geom` it
/// reads), checked: a blocked pointwise conv of `geom.m` input channels
/// with at most a bias, a residual and a clamp, whose result is the
/// kernel's only output.
fn projection(e: &mut Emit<'_>, c: &KCtx<'_>, geom: &ConvGeom) -> Result<Projection, String> {
    let g = c.g;
    let (_, pgeom, bias) = fused_pointwise(e, c, &c.k.projection, "projection")?;
    let (res, lo, hi) = super::group::projection_ep(g, &c.k.projection)
        .ok_or("projection: a blocked pointwise conv, a residual and a clamp at most")?;
    if (pgeom.c, pgeom.h, pgeom.w, pgeom.n) != (geom.m, geom.oh, geom.ow, geom.n) {
        return Err("projection: its input is not the depthwise conv's result".into());
    }
    let last = *c.k.projection.last().ok_or("no projection")?;
    let out = g.node(last).outputs[0];
    if c.k.outputs != [out] {
        return Err("projection: its result must be the kernel's only output".into());
    }
    let res = match res {
        Some(r) => Some(e.bufs[c.arg(r)?]),
        None => None,
    };
    let at = 2 + usize::from(!c.k.expansion.is_empty());
    Ok(Projection {
        w: e.bufs[*c.prep.get(at).ok_or("missing projection filter")?],
        m: pgeom.m,
        y: e.bufs[c.arg(out)?],
        bias,
        res,
        lo,
        hi,
    })
}

/// Projects the scratch row (output row `oy` of image `img` of the
/// depthwise conv `geom`, every channel block) into the same row of the
/// projection's output, its residual read at the same place.
fn project_row(
    e: &mut Emit<'_>,
    geom: &ConvGeom,
    p: &Projection,
    row: Value,
    (img, oy): (Value, Value),
) {
    let plane = geom.oh * geom.ow;
    let t = e.b.ins().imul_imm_s(img, (p.m * plane * 4) as i64);
    let t2 = e.b.ins().imul_imm_s(oy, (geom.ow * B * 4) as i64);
    let off = e.b.ins().iadd(t, t2);
    let y = e.b.ins().iadd(p.y, off);
    let res = p.res.map(|r| e.b.ins().iadd(r, off));
    let desc = ep_desc(
        e,
        p.bias,
        res.map(|r| (r, (0, 0))),
        (p.lo, p.hi, pgemm::ACT_NONE),
    );
    let args = [
        p.w,
        e.ci(geom.m as i64),
        e.ci(p.m as i64),
        row,
        e.ci(geom.ow as i64),
        e.ci(0),
        e.ci(geom.ow as i64),
        y,
        e.ci((plane * B) as i64),
        desc,
    ];
    call_band(e, &args);
}

/// Bytes of one task's ring of expanded rows: `kh` rows of every
/// channel block of the depthwise conv `geom`'s input, `[C/8][kh][W][8]`,
/// or a grouped window conv's padded rows and zero row
/// (`blocked::group_ring_floats`).
pub(crate) fn ring_bytes(geom: &ConvGeom) -> usize {
    if grouped_window(geom) {
        blocked::group_ring_floats(&super::group8::descriptor(geom)) * 4
    } else {
        geom.c * geom.kh * geom.w * 4
    }
}

/// Whether blocked conv kernel `k` computes an expansion
/// ([`super::group::absorb_expansions`]): a depthwise conv with a blocked
/// kernel, or a grouped window conv ([`fusable_grouped`]), whose input
/// outgrows a core's L2 ([`EXPANSION_MIN_BYTES`]).
pub(crate) fn takes_expansion(g: &Graph, k: &Kernel) -> bool {
    fusable_depthwise(g, k)
        .or_else(|| fusable_grouped(g, k))
        .is_some_and(|geom| geom.n * geom.c * geom.h * geom.w * 4 >= EXPANSION_MIN_BYTES)
}

/// Whether pointwise kernel `p` pays to be computed as kernel `k`'s
/// expansion, a row at a time. Into a grouped window conv, always (the
/// expanded map being at least [`EXPANSION_MIN_BYTES`],
/// [`takes_expansion`]): RegNetY-400MF at batch 8, one thread, 3
/// alternating profiles, every such block ran faster fused, those the
/// bound below would refuse too (104 -> 104 on 28x28 2.88-3.05 ->
/// 2.65-2.72 ms a block, 208 -> 208 on 14x14 2.27-2.51 -> 2.16-2.25,
/// 208 -> 440 stride 2 from 14x14 3.98-4.14 -> 3.63-3.71), the grouped
/// conv reading its windows in the ring's padded rows instead of
/// copying each row; at batch 1 the 7x7 blocks under 1 MiB ran 15%
/// slower fused (440 -> 440, 0.28-0.30 -> 0.32-0.37 ms; the 774 KB
/// filter each expanded row re-reads outgrows the L2). Into a depthwise
/// conv, where its input channels are at most
/// twice its rows' width, so the filter each expanded row re-reads
/// (`c_in x c_exp` floats, from L2) is no larger than the row's write and
/// read back that the fusion saves (`2 x w x c_exp`). Without this bound
/// every block of at least [`EXPANSION_MIN_BYTES`] fused, which at batch
/// 8 took in the blocks of 14x14 and 7x7 maps (64-160 channels in); per
/// block against the unfused build (`--unfused-blocks`, medians of 5-6
/// alternating profiles, one thread): MobileNet-V2's 14x14 blocks
/// 0.98-1.17, its 7x7 ones 1.06-1.21, where its 28x28 (32 in) ran
/// 0.89-0.91 and its 56x56 and 112x112 0.69-0.83; EfficientNet-B0's
/// SiLU blocks on 14x14 and 7x7 maps 1.01-1.27, those on 28x28 to 112x112
/// (16-40 in) 0.86-1.01 but its 28x28 40 -> 240 stride-1 block 1.095.
pub(crate) fn expansion_pays(g: &Graph, k: &Kernel, p: &Kernel) -> bool {
    if fusable_grouped(g, k).is_some() {
        return true;
    }
    ConvGeom::of_node(g, p.nodes[0]).is_ok_and(|pg| pg.c <= 2 * pg.w)
}

/// The least expanded tensor (bytes) a depthwise conv computes inside
/// its kernel. Smaller ones stay in cache between the two kernels, and
/// the fused kernel's row-by-row expansion re-reads the filter once per
/// row: MobileNet-V2's blocks on 28x28 and smaller maps (0.2-0.6 MB
/// expanded) ran 3-19% slower fused, those on 56x56 and 112x112 (1.8-4.8
/// MB) 3-20% faster (AMD EPYC, one thread, medians of 5 profiles).
const EXPANSION_MIN_BYTES: usize = 1 << 20;

/// A fused expansion's operands in generated code.
struct Expansion {
    /// Its packed filter.
    w: Value,
    /// Input channels.
    k: usize,
    /// Its input, `[N, k/8, H, W, 8]`.
    x: Value,
    /// Its epilogue descriptor (bias, clamp, activation).
    ep: Value,
}

/// The expansion of kernel `c` (a blocked depthwise conv `geom` reading
/// it), checked: a blocked pointwise conv of `geom.c` output channels
/// over a map of `geom`'s input size, with at most a bias and a clamp,
/// Sigmoid or SiLU.
fn expansion(e: &mut Emit<'_>, c: &KCtx<'_>, geom: &ConvGeom) -> Result<Expansion, String> {
    let (pw, pgeom, bias) = fused_pointwise(e, c, &c.k.expansion, "expansion")?;
    let (lo, hi, act) = super::group::expansion_ep(c.g, &c.k.expansion)
        .ok_or("expansion: a blocked pointwise conv and at most a clamp, Sigmoid or SiLU")?;
    if (pgeom.m, pgeom.oh, pgeom.ow, pgeom.n) != (geom.c, geom.h, geom.w, geom.n) {
        return Err("expansion: its result is not the depthwise conv's input".into());
    }
    let node = c.g.node(pw);
    let w = e.bufs[*c.prep.get(2).ok_or("missing expansion filter")?];
    let x = e.bufs[c.arg(node.inputs[0])?];
    let ep = ep_desc(e, bias, None, (lo, hi, act));
    Ok(Expansion {
        w,
        k: pgeom.c,
        x,
        ep,
    })
}

/// The pointwise conv that fused nodes `part` (an expansion or a
/// projection, `what`) start with, checked to have a blocked kernel: its
/// node, geometry and bias buffer.
fn fused_pointwise(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    part: &[dnnc_ir::NodeId],
    what: &str,
) -> Result<(dnnc_ir::NodeId, ConvGeom, Option<Value>), String> {
    let pw = *part.first().ok_or_else(|| format!("no {what}"))?;
    let pgeom = ConvGeom::of_node(c.g, pw)?;
    if let Some(why) = dnnc_passes::block_channels::unfit(&pgeom) {
        return Err(format!("{what}: {why}"));
    }
    if !pointwise(&pgeom) {
        return Err(format!("{what}: not a pointwise conv"));
    }
    let bias = match c.g.node(pw).inputs.get(2) {
        Some(&b) => {
            let t = &c.g.value(b).ty;
            if t.dtype != DType::F32 || t.shape != [pgeom.m] {
                return Err(format!("{what}: bias must be f32[{}]", pgeom.m));
            }
            Some(e.bufs[c.arg(b)?])
        }
        None => None,
    };
    Ok((pw, pgeom, bias))
}

/// Emits `dnnc_conv1x1_nchw8c_band(args..)`, failing with error code 1
/// when it returns non-zero.
fn call_band(e: &mut Emit<'_>, args: &[Value]) {
    let f = e.conv8c_band;
    call_checked(e, f, args);
}

/// Emits a call of runtime kernel `f`, failing with error code 1 when it
/// returns non-zero (a refused descriptor).
fn call_checked(e: &mut Emit<'_>, f: cranelift_codegen::ir::FuncRef, args: &[Value]) {
    let call = e.b.ins().call(f, args);
    let rc = e.b.inst_results(call)[0];
    let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
    e.fail_if(bad, 1);
}

/// Where a fused expansion writes its rows in a task's ring: row `iy`
/// of channel block `b` at `ring + (iy % kh) * slot_bytes + column_bytes
/// + b * block_floats * 4`.
struct RingLayout {
    /// Bytes between consecutive row slots of one channel block.
    slot_bytes: usize,
    /// Bytes before a row's first column in its slot (a grouped window
    /// conv's leading padding).
    column_bytes: usize,
    /// Floats between consecutive channel blocks.
    block_floats: usize,
}

/// Computes the expanded rows output row `r` (of the `N x OH` rows) needs
/// that the task's previous row did not, into their ring slots (row `iy`
/// in slot `iy % kh`, placed by `layout`): all `kh` tap rows on the
/// task's first row (`lo`) and an image's first, else those past the
/// previous row's last tap.
fn expand_rows(
    e: &mut Emit<'_>,
    geom: &ConvGeom,
    exp: &Expansion,
    ring: Value,
    (r, lo): (Value, Value),
    layout: &RingLayout,
) {
    let (s, pt, kh) = (
        geom.p.strides[0] as i64,
        geom.p.pads[0] as i64,
        geom.kh as i64,
    );
    let img = e.b.ins().udiv_imm_u(r, geom.oh as i64);
    let t = e.b.ins().imul_imm_s(img, geom.oh as i64);
    let oy = e.b.ins().isub(r, t);
    // First tap row, and the one past the previous row's last.
    let t = e.b.ins().imul_imm_s(oy, s);
    let first = e.b.ins().iadd_imm_s(t, -pt);
    let fresh = e.b.ins().iadd_imm_s(t, kh - s - pt);
    let restart_task = e.b.ins().icmp(IntCC::Equal, r, lo);
    let restart_image = e.b.ins().icmp_imm_s(IntCC::Equal, oy, 0);
    let restart = e.b.ins().bor(restart_task, restart_image);
    // (With a stride beyond the taps, rows between windows are skipped.)
    let fresh = e.b.ins().smax(fresh, first);
    let from = e.b.ins().select(restart, first, fresh);
    let zero = e.ci(0);
    let from = e.b.ins().smax(from, zero);
    let t = e.b.ins().iadd_imm_s(first, kh);
    let h = e.ci(geom.h as i64);
    let to = e.b.ins().smin(t, h);
    let hw = (geom.h * geom.w) as i64;
    let t =
        e.b.ins()
            .imul_imm_s(img, (exp.k * geom.h * geom.w * 4) as i64);
    let xi = e.b.ins().iadd(exp.x, t);
    e.for_range(from, to, 1, |e, iy| {
        let p0 = e.b.ins().imul_imm_s(iy, geom.w as i64);
        let p1 = e.b.ins().iadd_imm_s(p0, geom.w as i64);
        let slot = e.b.ins().urem_imm_u(iy, kh);
        let off = e.b.ins().imul_imm_s(slot, layout.slot_bytes as i64);
        let off = e.b.ins().iadd_imm_s(off, layout.column_bytes as i64);
        let yp = e.b.ins().iadd(ring, off);
        let args = [
            exp.w,
            e.ci(exp.k as i64),
            e.ci(geom.c as i64),
            xi,
            e.ci(hw),
            p0,
            p1,
            yp,
            e.ci(layout.block_floats as i64),
            exp.ep,
        ];
        call_band(e, &args);
    });
}

/// Unit `u` of the `N x blocks x OH` rows as (plane, image, block,
/// output row), `plane` being `image * blocks + block`.
fn row_unit(e: &mut Emit<'_>, u: Value, oh: usize, blocks: usize) -> (Value, Value, Value, Value) {
    let ohv = e.ci(oh as i64);
    let plane = e.b.ins().udiv(u, ohv);
    let t = e.b.ins().imul(plane, ohv);
    let oy = e.b.ins().isub(u, t);
    let bv = e.ci(blocks as i64);
    let img = e.b.ins().udiv(plane, bv);
    let t = e.b.ins().imul(img, bv);
    let blk = e.b.ins().isub(plane, t);
    (plane, img, blk, oy)
}

/// The generic epilogue over one unit's output row: row `u` of the
/// `N x OH` rows (every channel block) or, with `blocks`, row `u` of the
/// `N x C/8 x OH` rows of single blocks.
fn row_epilogue(
    e: &mut Emit<'_>,
    spec: &elementwise::EwSpec<'_>,
    geom: &ConvGeom,
    u: Value,
    blocks: Option<usize>,
) -> Result<(), String> {
    let (starts, lens) = match blocks {
        Some(cb) => {
            let (_, img, blk, oy) = row_unit(e, u, geom.oh, cb);
            (
                vec![Some(img), Some(blk), Some(oy), None, None],
                vec![1, 1, 1, geom.ow, B],
            )
        }
        None => {
            let (img, _, _, oy) = row_unit(e, u, geom.oh, 1);
            (
                vec![Some(img), None, Some(oy), None, None],
                vec![1, geom.m / B, 1, geom.ow, B],
            )
        }
    };
    elementwise::emit(e, spec, &SubDomain { starts, lens })
}

/// Input row `iy` of tap row `ky` for output row `oy`, and whether it
/// falls in the padding.
fn tap_row(e: &mut Emit<'_>, geom: &ConvGeom, oy: Value, ky: usize) -> (Value, Value) {
    let iy = e.b.ins().imul_imm_s(oy, geom.p.strides[0] as i64);
    let iy = e.b.ins().iadd_imm_s(iy, ky as i64 - geom.p.pads[0] as i64);
    let below = e.b.ins().icmp_imm_s(IntCC::SignedLessThan, iy, 0);
    let above =
        e.b.ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, iy, geom.h as i64);
    (iy, e.b.ins().bor(below, above))
}

/// What every row call of a blocked depthwise kernel shares, built once
/// before its loops: the row descriptor and the array of tap-row
/// pointers each call fills.
struct DwCall {
    geo: Value,
    rows: Value,
}

/// The [`dwrow::DwRowGeom`] of conv `geom` with clamp `lo..hi` and
/// activation `act`, channel blocks `x_block` floats apart in its tap
/// rows and `y_block` in its output rows, padding rows reading `zero`, in
/// a stack slot; and a slot for its `kh` tap-row pointers.
fn dw_call(
    e: &mut Emit<'_>,
    geom: &ConvGeom,
    (lo, hi, act): (f32, f32, u32),
    (x_block, y_block): (usize, usize),
    zero: Value,
) -> DwCall {
    let size = std::mem::size_of::<dwrow::DwRowGeom>() as u32;
    let ss =
        e.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 3));
    let geo = e.b.ins().stack_addr(I64, ss, 0);
    let fields = [
        (geom.w, std::mem::offset_of!(dwrow::DwRowGeom, w)),
        (geom.ow, std::mem::offset_of!(dwrow::DwRowGeom, ow)),
        (geom.kh, std::mem::offset_of!(dwrow::DwRowGeom, kh)),
        (geom.kw, std::mem::offset_of!(dwrow::DwRowGeom, kw)),
        (
            geom.p.strides[1],
            std::mem::offset_of!(dwrow::DwRowGeom, sx),
        ),
        (geom.p.pads[1], std::mem::offset_of!(dwrow::DwRowGeom, pl)),
        (x_block, std::mem::offset_of!(dwrow::DwRowGeom, x_block)),
        (y_block, std::mem::offset_of!(dwrow::DwRowGeom, y_block)),
        (geom.h, std::mem::offset_of!(dwrow::DwRowGeom, h)),
        (geom.oh, std::mem::offset_of!(dwrow::DwRowGeom, oh)),
        (
            geom.p.strides[0],
            std::mem::offset_of!(dwrow::DwRowGeom, sy),
        ),
        (geom.p.pads[0], std::mem::offset_of!(dwrow::DwRowGeom, pt)),
        (geom.c / B, std::mem::offset_of!(dwrow::DwRowGeom, blocks)),
    ];
    let mem = super::emit::mem();
    for (v, off) in fields {
        let v = e.ci(v as i64);
        e.b.ins().store(mem, v, geo, off as i32);
    }
    e.b.ins().store(
        mem,
        zero,
        geo,
        std::mem::offset_of!(dwrow::DwRowGeom, zero) as i32,
    );
    for (v, off) in [
        (lo, std::mem::offset_of!(dwrow::DwRowGeom, lo)),
        (hi, std::mem::offset_of!(dwrow::DwRowGeom, hi)),
    ] {
        let v = e.cf(v);
        e.b.ins().store(mem, v, geo, off as i32);
    }
    let act =
        e.b.ins()
            .iconst(cranelift_codegen::ir::types::I32, act as i64);
    e.b.ins().store(
        mem,
        act,
        geo,
        std::mem::offset_of!(dwrow::DwRowGeom, act) as i32,
    );
    let ss = e.b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        (geom.kh * 8) as u32,
        3,
    ));
    let rows = e.b.ins().stack_addr(I64, ss, 0);
    DwCall { geo, rows }
}

/// One output row of channel blocks `b0..b1` of a depthwise conv: one
/// call of the runtime's row kernel (`dnnc_dw_row_nchw8c`) with block
/// 0's tap rows `rows` (the zero row where in the padding), taps `w`,
/// output row `y`, residual row `res` and biases `bias`; error code 1 if
/// it refuses the descriptor.
fn call_rows(
    e: &mut Emit<'_>,
    call: &DwCall,
    rows: &[Value],
    (w, y, res, bias): (Value, Value, Option<Value>, Option<Value>),
    (b0, b1): (Value, Value),
) {
    for (ky, &row) in rows.iter().enumerate() {
        e.b.ins()
            .store(super::emit::mem(), row, call.rows, (ky * 8) as i32);
    }
    let null = e.ci(0);
    let args = [
        call.rows,
        w,
        y,
        res.unwrap_or(null),
        bias.unwrap_or(null),
        call.geo,
        b0,
        b1,
    ];
    let f = e.dw8c_row;
    call_checked(e, f, &args);
}

/// A channel-blocked max or average pool kernel (`data=nchw8c`): one call
/// of `dnnc_pool_nchw8c` per (image, channel block) plane of the task's
/// share, then the kernel's fused ops over that plane.
pub(crate) fn lower_pool(
    e: &mut Emit<'_>,
    c: &KCtx<'_>,
    p: &dnnc_ir::op::Pool2d,
    max: bool,
) -> Result<Vec<String>, String> {
    use dnnc_runtime::cpu::blocked_pool::PoolGeom;
    let g = c.g;
    let node = g.node(c.anchor());
    let (xs, ys) = (
        &g.value(node.inputs[0]).ty.shape,
        &g.value(node.outputs[0]).ty.shape,
    );
    let (&[n, cb, h, w, b], &[_, _, oh, ow, _]) = (xs.as_slice(), ys.as_slice()) else {
        return Err(format!(
            "a data=nchw8c pool reads and writes [N, C/8, H, W, 8], found {xs:?} and {ys:?}"
        ));
    };
    if b != B {
        return Err(format!(
            "a data=nchw8c pool's last axis must be {B}, found {b}"
        ));
    }
    let (x_plane, y_plane) = (
        c.plane_stride(node.inputs[0]),
        c.plane_stride(node.outputs[0]),
    );
    if (x_plane, y_plane) != (h * w * B, oh * ow * B) {
        return Err("a data=nchw8c pool needs dense planes".into());
    }
    let x = e.bufs[c.arg(node.inputs[0])?];
    let acc = acc_arg(c)?;
    let y = e.bufs[acc];
    let spec = epilogue(c, acc, None)?;
    // The geometry in a stack slot, each field at its offset (as the
    // depthwise row descriptor is written).
    use std::mem::offset_of;
    let fields = [
        (h, offset_of!(PoolGeom, h)),
        (w, offset_of!(PoolGeom, w)),
        (oh, offset_of!(PoolGeom, oh)),
        (ow, offset_of!(PoolGeom, ow)),
        (p.kernel[0], offset_of!(PoolGeom, kh)),
        (p.kernel[1], offset_of!(PoolGeom, kw)),
        (p.strides[0], offset_of!(PoolGeom, sh)),
        (p.strides[1], offset_of!(PoolGeom, sw)),
        (p.dilations[0], offset_of!(PoolGeom, dh)),
        (p.dilations[1], offset_of!(PoolGeom, dw)),
        (p.pads[0], offset_of!(PoolGeom, pt)),
        (p.pads[1], offset_of!(PoolGeom, pl)),
        (p.pads[2], offset_of!(PoolGeom, pb)),
        (p.pads[3], offset_of!(PoolGeom, pr)),
        (usize::from(!max), offset_of!(PoolGeom, avg)),
        (
            usize::from(p.count_include_pad),
            offset_of!(PoolGeom, include_pad),
        ),
    ];
    let ss = e.b.create_sized_stack_slot(StackSlotData::new(
        StackSlotKind::ExplicitSlot,
        std::mem::size_of::<PoolGeom>() as u32,
        3,
    ));
    let geo = e.b.ins().stack_addr(I64, ss, 0);
    for (v, off) in fields {
        let v = e.ci(v as i64);
        e.b.ins().store(super::emit::mem(), v, geo, off as i32);
    }
    // One call for the task's planes (it sets up once per call).
    let (lo, hi) = e.task_range(n * cb, "images x channel blocks")?;
    let f = e.pool8c;
    let call = e.b.ins().call(f, &[geo, x, y, lo, hi]);
    let rc = e.b.inst_results(call)[0];
    let bad = e.b.ins().icmp_imm_s(IntCC::NotEqual, rc, 0);
    e.fail_if(bad, 1);
    let mut err = Ok(());
    e.for_range(lo, hi, 1, |e, plane| {
        if let Some(spec) = &spec {
            let img = e.b.ins().udiv_imm_u(plane, cb as i64);
            let blk = e.b.ins().urem_imm_u(plane, cb as i64);
            let sub = SubDomain {
                starts: vec![Some(img), Some(blk), None, None, None],
                lens: vec![1, 1, oh, ow, B],
            };
            if err.is_ok() {
                err = elementwise::emit(e, spec, &sub);
            }
        }
    });
    err?;
    Ok(vec![
        "the channel-blocked pool kernel refused its geometry".to_string()
    ])
}
