//! # dnnc-ir
//!
//! The typed dataflow IR every part of dnnc speaks: ops are nodes of a
//! petgraph DAG, values are typed edges (dtype + static shape), and weights
//! live in a [`WeightStore`] beside the graph. The text format in [`text`] is
//! both the IR dump and dnnc's native model description.
//!
//! ```
//! use dnnc_ir::{Graph, Init, Op, TensorType, op::Unary};
//! let mut g = Graph::new("tiny");
//! let x = g.add_input("x", TensorType::f32(vec![1, 4])).unwrap();
//! let w = g.add_param("w", TensorType::f32(vec![4, 2]), Init::Xavier { seed: 1 }).unwrap();
//! let y = g.add(Op::MatMul, &[x, w], "y").unwrap();
//! let r = g.add(Op::Unary(Unary::Relu), &[y], "r").unwrap();
//! g.set_outputs(vec![r]);
//! assert_eq!(g.value(r).ty, TensorType::f32(vec![1, 2]));
//! dnnc_ir::verify(&g).unwrap();
//! ```

#![warn(missing_docs)]

pub mod attr;
pub mod dot;
pub mod graph;
pub mod infer;
pub mod init;
pub mod isa;
pub mod memplan;
pub mod op;
pub mod tensor;
pub mod text;
pub mod types;
pub mod verify;

pub use attr::{AttrError, AttrReader, AttrValue};
pub use graph::{Graph, GraphError, Node, NodeId, Use, Value, ValueId};
pub use init::Init;
pub use op::{Op, OpClass};
pub use tensor::{Tensor, WeightStore};
pub use types::{DType, TensorType};
pub use verify::{verify, VerifyError};
