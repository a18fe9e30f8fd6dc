//! Prost message types for `onnx.proto` (package `onnx`), generated from
//! `compiler/proto/onnx.proto`; see `compiler/proto/README.md` for how to
//! regenerate. Public so tests and tools can build models in Rust.

#![allow(missing_docs, clippy::all, clippy::pedantic, rustdoc::all)]

include!("onnx_pb.rs");
