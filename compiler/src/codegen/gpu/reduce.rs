//! Placeholder.
use super::GCtx;
use dnnc_ir::Op;

pub(crate) fn supports(_op: &Op) -> bool {
    false
}

pub(crate) fn lower(_cx: &mut GCtx<'_>) -> Result<Vec<dnnc_runtime::gpu::GpuStage>, String> {
    Err("not yet".into())
}
