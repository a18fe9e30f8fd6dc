//! Padded planes: which NCHW activations the CPU backend stores with each
//! `H x W` plane padded to whole 64-byte lines.
//!
//! A GEMM over a conv's planes reads and writes them as matrix rows. With
//! `H·W` not a multiple of 16 (SqueezeNet's 55x55, 27x27 and 13x13 maps,
//! GoogLeNet's 14x14 and 7x7) almost every 16-float vector of a row
//! straddles two cache lines, and a GEMM split by columns across threads
//! writes the line at its split point of every row from both cores, so
//! the line travels between them and back for every row (measured on a
//! chain of 64 x 3025 x 16 and 16 x 3025 x 64 GEMMs at two threads, each
//! thread working on its own columns with no synchronisation at all:
//! 36 µs a GEMM on shared rows, 27 µs with the rows padded to 3040
//! floats or each thread on a buffer of its own). The padding is not
//! part of the tensor: the IR, the interpreter and every graph input and
//! output keep dense planes.
//!
//! A value is padded only where every kernel writing or reading it
//! addresses its planes through [`super::KCtx::plane_stride`] on a path
//! known to honour the stride ([`Planes::plan`]'s list); a lowering that
//! meets a padded value it did not ask the stride of fails to compile
//! instead of reading dense planes (`super::compile_cpu` checks).

use super::contraction::ConvAlgo;
use super::group::Kernel;
use super::group::KernelKind;
use super::CpuOptions;
use dnnc_ir::op::Unary;
use dnnc_ir::{DType, Graph, NodeId, Op, ValueId};
use std::collections::{HashMap, HashSet};

/// Floats a padded plane's stride is a multiple of: one 64-byte line.
pub(crate) const PLANE_ALIGN: usize = 16;

/// Smallest plane that is padded: below it the padding is a large share
/// of the plane and a row is a fraction of a line anyway.
pub(crate) const MIN_PADDED_PLANE: usize = 32;

/// The padded plane strides (in floats) of the values stored padded.
#[derive(Clone, Debug, Default)]
pub(crate) struct Planes {
    padded: HashMap<ValueId, usize>,
}

impl Planes {
    /// The plane stride of padded value `v`, `None` for a dense one.
    pub fn padded(&self, v: ValueId) -> Option<usize> {
        self.padded.get(&v).copied()
    }

    /// Bytes of `v`'s buffer: its padded planes, or its dense size.
    pub fn bytes(&self, g: &Graph, v: ValueId) -> usize {
        let ty = &g.value(v).ty;
        match (self.padded(v), ty.shape.as_slice()) {
            (Some(p), [n, c, _, _]) => n * c * p * 4,
            _ => ty.size_bytes(),
        }
    }

    /// Decides which values to pad: rank-4 f32 activations whose plane
    /// (at least [`MIN_PADDED_PLANE`] floats) is not whole lines, that
    /// are no graph input or output, written by a kernel that honours a
    /// padded result and read only by kernels that honour a padded
    /// operand ([`writes_padded`], [`reads_padded`]). A Concat built in
    /// place (`concats`: its result and parts) is padded whole or not at
    /// all, its parts' planes at the result's stride; so is a Split
    /// routed into it (`routed`): its operand, written by the operand's
    /// kernel where the Concat's part is, and every result (views).
    pub fn plan(
        g: &Graph,
        kernels: &[Kernel],
        concats: &[(ValueId, Vec<ValueId>)],
        routed: &[Routed],
        opts: &CpuOptions,
    ) -> Planes {
        let mut planes = Planes::default();
        if opts.dense_planes {
            return planes;
        }
        let outputs: HashSet<ValueId> = g.outputs().iter().copied().collect();
        let concat_kernel: HashSet<ValueId> = concats.iter().map(|(r, _)| *r).collect();
        let writer = |v: ValueId| kernels.iter().find(|k| k.outputs.contains(&v));
        // Kernels reading `v`, other than an in-place Concat of it.
        let concat_kernel = &concat_kernel;
        // Kernels reading `v`, other than an in-place Concat of it or a
        // routed Split (both generated as nothing).
        let readers = move |v: ValueId| {
            kernels.iter().enumerate().filter_map(move |(ki, k)| {
                let read = k.inputs.contains(&v)
                    && !k
                        .outputs
                        .iter()
                        .any(|o| concat_kernel.contains(o) && k.nodes.len() == 1)
                    && !routed.iter().any(|r| r.kernel == ki);
                read.then_some(k)
            })
        };
        let stride = |v: ValueId| -> Option<usize> {
            let ty = &g.value(v).ty;
            let [_, _, h, w] = ty.shape[..] else {
                return None;
            };
            let hw = h * w;
            let fits = ty.dtype == DType::F32
                && hw >= MIN_PADDED_PLANE
                && !hw.is_multiple_of(PLANE_ALIGN)
                && !outputs.contains(&v)
                && !matches!(
                    g.node(g.value(v).producer).op,
                    Op::Input | Op::Param(_) | Op::Constant
                );
            fits.then(|| hw.next_multiple_of(PLANE_ALIGN))
        };
        let read_ok = |v: ValueId| readers(v).all(|k| reads_padded(g, k, v, opts));
        let read_ok = &read_ok;
        let mut in_concat: HashSet<ValueId> = HashSet::new();
        for (r, parts) in concats {
            in_concat.extend(parts.iter().copied());
            in_concat.insert(*r);
            let routes: Vec<&Routed> = routed.iter().filter(|s| s.concat == *r).collect();
            for s in &routes {
                in_concat.insert(s.operand);
                in_concat.extend(s.parts.iter().copied());
            }
            let Some(p) = stride(*r) else {
                continue;
            };
            // A routed part is written by its Split's operand's kernel.
            let written = |v: ValueId| match routes.iter().find(|s| s.parts.contains(&v)) {
                Some(s) => {
                    stride(s.operand) == Some(p)
                        && writer(s.operand).is_some_and(|k| writes_padded(g, k, s.operand, opts))
                        && s.parts.iter().all(|&q| stride(q) == Some(p) && read_ok(q))
                }
                None => writer(v).is_some_and(|k| writes_padded(g, k, v, opts)),
            };
            let ok = read_ok(*r)
                && parts
                    .iter()
                    .all(|&v| stride(v) == Some(p) && read_ok(v) && written(v));
            if ok {
                planes.padded.insert(*r, p);
                planes.padded.extend(parts.iter().map(|&v| (v, p)));
                for s in &routes {
                    planes.padded.insert(s.operand, p);
                    planes.padded.extend(s.parts.iter().map(|&v| (v, p)));
                }
            }
        }
        for k in kernels {
            for &v in &k.outputs {
                if in_concat.contains(&v) {
                    continue;
                }
                let Some(p) = stride(v) else {
                    continue;
                };
                if writes_padded(g, k, v, opts) && read_ok(v) {
                    planes.padded.insert(v, p);
                }
            }
        }
        planes
    }
}

/// A Split whose operand is placed against an in-place Concat's buffer
/// so that the Concat's part among its results needs no copy
/// (`super::routed_splits`).
#[derive(Clone, Debug)]
pub(crate) struct Routed {
    /// Index of the Split's kernel (generated as nothing).
    pub kernel: usize,
    /// The Split's operand.
    pub operand: ValueId,
    /// The Split's results, in order.
    pub parts: Vec<ValueId>,
    /// The Concat's result.
    pub concat: ValueId,
    /// The result that is the Concat's first operand (the operand's last
    /// part: the operand starts before the Concat) or its last (the
    /// operand's first part: the operand ends after it).
    pub part: ValueId,
}

/// A conv kernel whose planes the lowering addresses by stride: an
/// ungrouped NCHW conv run as a pointwise GEMM (its filter packed, bias
/// and Relu/Clip in the GEMM's epilogue) or as Winograd, with nothing
/// absorbed, reading only its data input, filter and bias: its data
/// input and its result.
fn strided_conv(g: &Graph, k: &Kernel, opts: &CpuOptions) -> Option<(ValueId, ValueId)> {
    let conv = *k.nodes.first()?;
    let node = g.node(conv);
    let Op::Conv2d(_) = node.op else {
        return None;
    };
    if k.kind != KernelKind::Contraction
        || !k.prologue.is_empty()
        || !k.expansion.is_empty()
        || !k.projection.is_empty()
        || !k.pool.is_empty()
        || k.concat.is_some()
        || !clamp_chain(g, &k.nodes)
    {
        return None;
    }
    let algo = super::contraction::strided_algo(g, k, opts)?;
    let x = *node.inputs.first()?;
    let reads_own = k.inputs.iter().all(|v| node.inputs.contains(v));
    let out = *k.nodes.last().and_then(|&n| g.node(n).outputs.first())?;
    let fits = reads_own
        && k.outputs == [out]
        && match algo {
            ConvAlgo::Pointwise => k.nodes.len() <= 2 && super::contraction::packs_fused(g, k),
            ConvAlgo::Winograd2 | ConvAlgo::Winograd4 => true,
            _ => false,
        };
    fits.then_some((x, out))
}

/// Whether nodes `[conv, ops..]` are the conv followed by a chain of
/// Relu and Clip, each reading the one before.
fn clamp_chain(g: &Graph, nodes: &[NodeId]) -> bool {
    nodes.windows(2).all(|p| {
        let (a, b) = (g.node(p[0]), g.node(p[1]));
        matches!(b.op, Op::Unary(Unary::Relu) | Op::Unary(Unary::Clip { .. }))
            && b.inputs.len() == 1
            && a.outputs.first() == b.inputs.first()
    })
}

/// Whether kernel `k` is one MaxPool node on plain data.
fn max_pool(g: &Graph, k: &Kernel) -> bool {
    k.kind == KernelKind::Reduction
        && matches!(k.nodes.as_slice(), [n] if matches!(&g.node(*n).op,
            Op::MaxPool(p) if p.data == dnnc_ir::op::DataLayout::Nchw))
}

/// Whether kernel `k` writes result `v` with padded planes: a strided
/// conv's result, a max pool's, or the pool output of a conv kernel that
/// absorbed its max pool (written a band at a time by the pool's code).
pub(crate) fn writes_padded(g: &Graph, k: &Kernel, v: ValueId, opts: &CpuOptions) -> bool {
    if max_pool(g, k) || (!k.pool.is_empty() && k.outputs == [v]) {
        return k.outputs == [v];
    }
    strided_conv(g, k, opts).is_some_and(|(_, out)| out == v)
}

/// Whether kernel `k` reads operand `v` with padded planes: as a strided
/// conv's data input or a max pool's input.
pub(crate) fn reads_padded(g: &Graph, k: &Kernel, v: ValueId, opts: &CpuOptions) -> bool {
    if max_pool(g, k) {
        return g.node(k.nodes[0]).inputs.first() == Some(&v);
    }
    strided_conv(g, k, opts).is_some_and(|(x, out)| x == v && out != v)
}
