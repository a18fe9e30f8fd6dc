//! Elementwise chains: one invocation per element of the kernel's
//! iteration space (the broadcast of its outputs' shapes), each node's
//! value a WGSL `let`, operands loaded at their broadcast index.

use super::point::Point;
use super::wgsl::{digits, flat_stage};
use super::GCtx;
use dnnc_ir::infer::broadcast_shapes;
use std::collections::HashMap;

/// The iteration shape: every output broadcast together.
pub(crate) fn iteration_shape(cx: &GCtx<'_>) -> Result<Vec<usize>, String> {
    let mut shape: Vec<usize> = Vec::new();
    for &v in &cx.k.outputs {
        shape = broadcast_shapes(&shape, &cx.g.value(v).ty.shape)?;
    }
    Ok(shape)
}

/// One shader evaluating the chain per point.
pub(crate) fn lower(cx: &mut GCtx<'_>) -> Result<Vec<dnnc_runtime::gpu::GpuStage>, String> {
    let shape = iteration_shape(cx)?;
    let n: usize = shape.iter().product();
    let loc = cx.locf();
    let mut p = Point {
        g: cx.g,
        shape: &shape,
        prefix: "i",
        known: HashMap::new(),
    };
    let mut body = digits("gi", &shape, "i");
    body += &p.eval(&cx.k.nodes, &loc)?;
    body += &p.store_outputs(&cx.k.outputs, "gi", &loc)?;
    Ok(vec![flat_stage(&cx.label(""), n, cx.limits(), "", &body)])
}
