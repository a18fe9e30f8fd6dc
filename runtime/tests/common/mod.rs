//! Shared helpers for the interpreter tests: build one-op graphs through the
//! Graph API and compare results with hand-computed values.

#![allow(dead_code)]

use dnnc_ir::{Graph, Op, Tensor};
use dnnc_runtime::{run, RunError};
use ndarray::ArrayD;

/// An f32 tensor from a shape and row-major data.
pub fn f(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::F32(
        ArrayD::from_shape_vec(shape.to_vec(), data.to_vec()).expect("test data fits shape"),
    )
}

/// An i64 tensor from a shape and row-major data.
pub fn i(shape: &[usize], data: &[i64]) -> Tensor {
    Tensor::I64(
        ArrayD::from_shape_vec(shape.to_vec(), data.to_vec()).expect("test data fits shape"),
    )
}

/// A bool tensor from a shape and row-major data.
pub fn b(shape: &[usize], data: &[bool]) -> Tensor {
    Tensor::Bool(
        ArrayD::from_shape_vec(shape.to_vec(), data.to_vec()).expect("test data fits shape"),
    )
}

/// `0, 1, 2, ...` as f32 with the given shape.
pub fn iota(shape: &[usize], start: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|k| start + k as f32).collect();
    f(shape, &data)
}

/// Runs `op` on `ins`, each fed as a graph input `x0`, `x1`, ...
pub fn try_eval(op: Op, ins: &[Tensor]) -> Result<Vec<Tensor>, RunError> {
    let mut g = Graph::new("t");
    let ids: Vec<_> = ins
        .iter()
        .enumerate()
        .map(|(k, t)| g.add_input(&format!("x{k}"), t.ty()).expect("input"))
        .collect();
    let names: Vec<String> = (0..op.num_outputs()).map(|k| format!("y{k}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let outs = g.add_node(op, &ids, &refs).expect("node type-checks");
    g.set_outputs(outs);
    let feeds: Vec<(String, Tensor)> = ins
        .iter()
        .enumerate()
        .map(|(k, t)| (format!("x{k}"), t.clone()))
        .collect();
    run(&g, &feeds)
}

/// Runs a single-result op and returns its result.
pub fn eval(op: Op, ins: &[Tensor]) -> Tensor {
    let mut out = try_eval(op, ins).expect("op runs");
    out.remove(0)
}

/// Asserts `t` is f32 with the given shape and values within `1e-5`
/// (absolute, plus relative for large values).
pub fn assert_f32(t: &Tensor, shape: &[usize], expected: &[f32]) {
    assert_f32_tol(t, shape, expected, 1e-5);
}

/// As [`assert_f32`] with an explicit tolerance.
pub fn assert_f32_tol(t: &Tensor, shape: &[usize], expected: &[f32], tol: f32) {
    let a = t
        .as_f32()
        .unwrap_or_else(|| panic!("expected f32, got {}", t.ty()));
    assert_eq!(a.shape(), shape, "shape");
    let got: Vec<f32> = a.iter().copied().collect();
    assert_eq!(got.len(), expected.len(), "element count");
    for (k, (&g, &e)) in got.iter().zip(expected).enumerate() {
        let ok = (g == e) || (g - e).abs() <= tol * (1.0 + e.abs()) || (g.is_nan() && e.is_nan());
        assert!(
            ok,
            "element {k}: got {g}, expected {e}\n  got all: {got:?}\n  expected: {expected:?}"
        );
    }
}

/// Asserts `t` is i64 with the given shape and values.
pub fn assert_i64(t: &Tensor, shape: &[usize], expected: &[i64]) {
    let a = t
        .as_i64()
        .unwrap_or_else(|| panic!("expected i64, got {}", t.ty()));
    assert_eq!(a.shape(), shape, "shape");
    assert_eq!(a.iter().copied().collect::<Vec<_>>(), expected);
}
