//! Seeded inputs and interpreter runs shared by the passes' unit tests,
//! which check a rewrite against the reference interpreter.

use dnnc_ir::{Graph, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};

/// Deterministic inputs in [-1, 1) without an RNG crate.
pub(crate) fn seeded(ty: &TensorType, seed: u64) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data = (0..ty.shape.iter().product::<usize>())
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(&ty.shape), data).unwrap())
}

/// `g` on the interpreter, input `i` seeded with `i + 7`.
pub(crate) fn run(g: &Graph) -> Vec<Tensor> {
    let feeds: Vec<(String, Tensor)> = g
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            (
                g.value(v).name.clone(),
                seeded(&g.value(v).ty, i as u64 + 7),
            )
        })
        .collect();
    dnnc_runtime::run(g, &feeds).unwrap()
}
