//! # dnnc-passes
//!
//! Analyses and rewrites over the dnnc IR. At present: the Work-Depth
//! analysis in [`wd`], the machine-independent half of dnnc's cost model
//! (work, critical-path depth, average parallelism, Brent's bounds, and the
//! figures of every convolution algorithm per Conv2d node).

#![warn(missing_docs)]

pub mod wd;

pub use wd::{analyze, render_json, render_table, Analysis, ConvAlgos, Cost, NodeCost};
