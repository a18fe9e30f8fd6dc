//! # dnnc-runtime
//!
//! Executors for dnnc graphs. Today this is the reference interpreter in
//! [`interp`]: a straightforward, ONNX-faithful evaluator of every IR op that
//! serves as the numeric oracle for graph rewrites and for the compiled
//! backends. It favours clarity and exact semantics over speed, but uses
//! im2col + a blocked GEMM for convolutions so real CNNs run in seconds.
//!
//! ```
//! use dnnc_ir::{Graph, Init, Op, Tensor, TensorType, op::Unary};
//! use ndarray::ArrayD;
//! let mut g = Graph::new("tiny");
//! let x = g.add_input("x", TensorType::f32(vec![1, 2])).unwrap();
//! let w = g.add_param("w", TensorType::f32(vec![2, 2]), Init::Ones).unwrap();
//! let y = g.add(Op::MatMul, &[x, w], "y").unwrap();
//! let r = g.add(Op::Unary(Unary::Relu), &[y], "r").unwrap();
//! g.set_outputs(vec![r]);
//! let x = ArrayD::from_shape_vec(vec![1, 2], vec![1.0f32, -3.0]).unwrap();
//! let out = dnnc_runtime::run(&g, &[("x".to_string(), Tensor::F32(x))]).unwrap();
//! // [1, -3] x ones(2, 2) = [-2, -2], then relu.
//! assert_eq!(out[0].as_f32().unwrap().as_slice().unwrap(), &[0.0, 0.0]);
//! ```

#![warn(missing_docs)]

pub mod cpu;
pub mod gpu;
pub mod interp;
mod kernels;
pub use kernels::resize_axis_taps;

pub use interp::{run, RunError};
