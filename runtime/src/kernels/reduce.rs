//! ReduceMean / ReduceSum / ReduceMax.

use super::{reshape, KResult};
use dnnc_ir::op::ReduceKind;
use ndarray::{ArrayD, Axis};

/// Reduces over `axes` (every axis when empty). Sums accumulate in f64.
/// `keepdims` keeps reduced axes as size 1.
pub(crate) fn reduce(
    x: &ArrayD<f32>,
    kind: ReduceKind,
    axes: &[i64],
    keepdims: bool,
) -> KResult<ArrayD<f32>> {
    let r = x.ndim();
    let ax = dnnc_ir::infer::reduce_axes(axes, r)?;
    let count: usize = ax.iter().map(|&a| x.shape()[a]).product();
    let mut cur = x.mapv(|v| v as f64);
    // Remove axes from the back so earlier indices stay valid.
    for &a in ax.iter().rev() {
        cur = match kind {
            ReduceKind::Max => cur.fold_axis(Axis(a), f64::NEG_INFINITY, |&m, &v| {
                if v > m || v.is_nan() {
                    v
                } else {
                    m
                }
            }),
            ReduceKind::Sum | ReduceKind::Mean => cur.sum_axis(Axis(a)),
        };
    }
    if kind == ReduceKind::Mean {
        cur.mapv_inplace(|v| v / count as f64);
    }
    let shape: Vec<usize> = x
        .shape()
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (ax.contains(&i), keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    reshape(cur.mapv(|v| v as f32), shape)
}
