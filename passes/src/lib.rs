//! # dnnc-passes
//!
//! Analyses and rewrites over the dnnc IR. At present: the Work-Depth
//! analysis in [`wd`], the machine-independent half of dnnc's cost model
//! (work, critical-path depth, average parallelism, Brent's bounds, and the
//! figures of every convolution algorithm per Conv2d node), and the
//! optimisation [`pipeline`]: [`simplify`], [`fold_bn`] (`fold-batchnorm`)
//! then [`conv_algo`] (`select-conv-algo`, which records each Conv2d's
//! algorithm in the IR) and the [`fusion`] overlay that groups nodes into kernels.

#![warn(missing_docs)]

pub mod block_channels;
pub mod conv_algo;
pub mod cost;
pub mod egraph;
pub mod fold_bn;
pub mod fold_weights;
pub mod fusion;
pub mod pipeline;
pub mod simplify;
pub mod split_order;
#[cfg(test)]
mod test_inputs;
pub mod wd;

pub use conv_algo::{ConvGeom, SelectConvAlgo};

/// A free value name for a weight a pass derives from `name`:
/// `<stem><suffix>.<tag>`, numbered (`.<tag>2`, ...) if taken, where
/// `stem` is `name` without a previous `.<tag>` or `.<tag>N`, so a
/// weight rewritten twice does not pile up tags.
pub(crate) fn tagged_name(g: &dnnc_ir::Graph, name: &str, suffix: &str, tag: &str) -> String {
    let mark = format!(".{tag}");
    let stem = match name.rfind(&mark) {
        Some(i) if name[i + mark.len()..].chars().all(|c| c.is_ascii_digit()) => &name[..i],
        _ => name,
    };
    let base = format!("{stem}{suffix}{mark}");
    let mut cand = base.clone();
    let mut n = 2;
    while g.value_by_name(&cand).is_some() {
        cand = format!("{base}{n}");
        n += 1;
    }
    cand
}
pub use fusion::{fuse, print_kernels, verify_kernels, Kernel, KernelGraph, KernelKind};
pub use pipeline::{Pass, PassError, PassStats, Pipeline, PipelineResult};
pub use wd::{analyze, render_json, render_table, Analysis, ConvAlgos, Cost, NodeCost};
