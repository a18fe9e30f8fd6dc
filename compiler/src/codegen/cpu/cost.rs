//! Per-kernel Work-Depth figures the runtime's scheduler uses to decide
//! whether independent kernels run concurrently (`Step::work`,
//! `Step::split_work`; the rule is in `dnnc_runtime::cpu::schedule`).

use super::contraction::{self, ConvAlgo};
use super::group::Kernel;
use super::CpuOptions;
use dnnc_ir::{Graph, NodeId, Op, TensorType};
use dnnc_runtime::cpu::native::gemm_tasks_in_run;

/// W-D work of node `n` (`dnnc_passes::wd::node_cost`; Conv2d as direct).
fn node_work(g: &Graph, n: NodeId) -> u64 {
    let node = g.node(n);
    let ins: Vec<&TensorType> = node.inputs.iter().map(|&v| &g.value(v).ty).collect();
    let outs: Vec<&TensorType> = node.outputs.iter().map(|&v| &g.value(v).ty).collect();
    dnnc_passes::wd::node_cost(&node.op, &ins, &outs).pair().0
}

/// W-D work of a Conv2d node `n` lowered with `algo` (Winograd and FFT do
/// less arithmetic than the direct count `node_cost` uses).
fn conv_work(g: &Graph, n: NodeId, algo: Option<ConvAlgo>) -> Option<u64> {
    let node = g.node(n);
    let Op::Conv2d(c) = &node.op else {
        return None;
    };
    let ty = |v: Option<&dnnc_ir::ValueId>| v.map(|&v| &g.value(v).ty);
    let (Some(x), Some(w), Some(y)) = (
        ty(node.inputs.first()),
        ty(node.inputs.get(1)),
        ty(node.outputs.first()),
    ) else {
        return None;
    };
    let shape = dnnc_passes::wd::ConvShape::from_types(c, x, w, y);
    let cost = match algo? {
        ConvAlgo::Winograd2 => shape.winograd(2).ok()?,
        ConvAlgo::Winograd4 => shape.winograd(4).ok()?,
        ConvAlgo::Fft => shape.fft().ok()?,
        _ => shape.direct(),
    };
    Some(cost.work)
}

/// `(W, S)` of kernel `k`: `W` sums the W-D work of its nodes (a conv
/// counted with the algorithm it is lowered with); `S` is the
/// anchor's work when the anchor is one GEMM per image (and group) large
/// enough for `dnnc_sgemm` to split on two threads (Gemm, MatMul, im2col
/// and pointwise convolutions), else 0. Winograd's per-frequency GEMMs,
/// FFT, direct and depthwise convolutions never split.
pub(crate) fn kernel_work(g: &Graph, k: &Kernel, opts: &CpuOptions) -> (u64, u64) {
    let algo = contraction::algo_of(g, k, opts);
    let w = k
        .nodes
        .iter()
        .map(|&n| conv_work(g, n, algo).unwrap_or_else(|| node_work(g, n)))
        .chain(
            k.expansion
                .iter()
                .chain(&k.projection)
                .chain(&k.pool)
                .map(|&n| node_work(g, n)),
        )
        .fold(0u64, u64::saturating_add);
    let Some(a) = k.anchor else {
        return (w, 0);
    };
    let node = g.node(a);
    let Some(out) = node.outputs.first().map(|&v| &g.value(v).ty) else {
        return (w, 0);
    };
    let macs = node_work(g, a);
    let numel = out.shape.iter().product::<usize>().max(1) as u64;
    let kk = (macs / numel) as usize;
    let rank = out.shape.len();
    let dim = |i: usize| out.shape.get(i).copied().unwrap_or(1);
    let (m, n) = match &node.op {
        Op::MatMul | Op::Gemm(_) if rank >= 1 => {
            (if rank >= 2 { dim(rank - 2) } else { 1 }, dim(rank - 1))
        }
        Op::Conv2d(c) => match algo {
            Some(ConvAlgo::Im2col | ConvAlgo::Pointwise) => {
                (dim(1) / c.group.max(1), dim(2) * dim(3))
            }
            _ => return (w, 0),
        },
        _ => return (w, 0),
    };
    let s = if gemm_tasks_in_run(m, n, kk, 2) > 1 {
        macs
    } else {
        0
    };
    (w, s.min(w))
}
