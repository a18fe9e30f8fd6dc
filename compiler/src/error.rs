//! The one error type the CLI reports. Every user-facing failure maps to it
//! and to exit code 2; internal bugs are the only panics.

use dnnc_ir::tensor::TensorIoError;
use dnnc_ir::text::ParseError;
use dnnc_ir::{GraphError, VerifyError};
use dnnc_runtime::RunError;

/// Anything that can go wrong between reading a model and writing results.
#[derive(Debug, thiserror::Error)]
pub enum DnncError {
    /// The model text did not parse; carries spans for a caret snippet.
    #[error(transparent)]
    Parse(Box<ParseError>),
    /// The ONNX model could not be imported; names the node(s).
    #[error("{0}")]
    Onnx(#[from] crate::onnx::OnnxError),
    /// A graph-level problem (weights binding, types).
    #[error("{0}")]
    Graph(#[from] GraphError),
    /// The verifier rejected the graph.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
    Verify(Vec<VerifyError>),
    /// A tensor file (.npy, .safetensors) could not be read or written.
    #[error("{0}")]
    TensorIo(#[from] TensorIoError),
    /// Execution failed (bad input shape or dtype, missing weights...).
    #[error("{0}")]
    Run(#[from] RunError),
    /// A backend could not compile the graph (e.g. an op it lacks).
    #[error("{0}")]
    Codegen(#[from] crate::codegen::cpu::CodegenError),
    /// The GPU could not be used or a GPU run failed (no adapter, out of
    /// memory, device lost, limits exceeded).
    #[error("{0}")]
    Gpu(#[from] dnnc_runtime::gpu::GpuError),
    /// A file could not be read or written.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        /// What was attempted ("read", "create directory"...).
        action: &'static str,
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// An optimisation pass failed, or `--after` named no pass.
    #[error("{0}")]
    Pass(#[from] dnnc_passes::PassError),
    /// A command-line argument is invalid in a way clap cannot see.
    #[error("{0}")]
    Usage(String),
    /// The model format is recognised but not supported yet.
    #[error("{0}")]
    Unsupported(String),
}

impl From<ParseError> for DnncError {
    fn from(e: ParseError) -> Self {
        DnncError::Parse(Box::new(e))
    }
}

impl DnncError {
    /// Process exit code: 2 for every user error, like clap's usage errors.
    pub fn exit_code(&self) -> i32 {
        2
    }
}
