//! # dnnc-compiler
//!
//! Frontends (text model descriptions today, ONNX next), code generators
//! (to come) and the `dnnc` command-line tool. The CLI in [`cli`] is a thin
//! layer over the library functions here, so everything it does is callable
//! from Rust.

#![warn(missing_docs)]

pub mod bench;
pub mod cli;
pub mod codegen;
pub mod conformance;
pub mod error;
pub mod model;
pub mod onnx;
pub mod tune;

pub use error::DnncError;
pub use model::{load_model, load_model_str};
