//! The ONNX frontend: decodes a `ModelProto` with prost and imports it into
//! a verified-by-construction [`dnnc_ir::Graph`].
//!
//! - Value names are the ONNX names. f32 initializers become `param`s with
//!   `Init::External(<initializer name>)` and their data in `g.weights`, so
//!   `--weights` can still override them by name; integer and boolean
//!   initializers and everything computed at import become `const`s.
//! - Shapes are static: a symbolic input dimension is an error. Because of
//!   that, shape subgraphs (`Shape` → `Gather` → `Unsqueeze` → `Concat` →
//!   `Reshape`...) are evaluated at import — IR ops on the reference
//!   interpreter, `Shape`/`Cast`/`Range`/... here — and vanish from the IR.
//! - Every unsupported node is reported at once in
//!   [`OnnxError::Unsupported`]; malformed input never panics.
//!
//! ```no_run
//! let g = dnnc_compiler::onnx::import_onnx_file("model.onnx").unwrap();
//! dnnc_ir::verify(&g).unwrap();
//! ```

mod decode;
mod error;
mod fold;
mod import;
pub mod proto;

pub use error::{OnnxError, UnsupportedNode};
pub use import::{OPSET_RANGE, SUPPORTED_OPS};

use dnnc_ir::Graph;
use prost::Message;
use std::path::Path;

/// Imports an ONNX model held in memory. `file_name` names it in errors and
/// gives the graph its name when the model's graph has none.
pub fn import_onnx(bytes: &[u8], file_name: &str) -> Result<Graph, OnnxError> {
    let run = || {
        let model = proto::ModelProto::decode(bytes).map_err(|e| OnnxError::Decode {
            file: file_name.to_string(),
            message: e.to_string(),
        })?;
        import::import_model(&model, file_name)
    };
    // The importer validates what it reads, but a malformed model must
    // never take the process down: a panic is reported as an internal error.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string());
            Err(OnnxError::Internal {
                file: file_name.to_string(),
                message,
            })
        }
    }
}

/// Reads and imports an ONNX model file.
pub fn import_onnx_file(path: impl AsRef<Path>) -> Result<Graph, OnnxError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| OnnxError::Io {
        path: path.display().to_string(),
        source,
    })?;
    import_onnx(&bytes, &path.display().to_string())
}
