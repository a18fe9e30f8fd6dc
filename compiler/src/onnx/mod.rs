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

use dnnc_ir::{Graph, Tensor};
use prost::Message;
use std::path::Path;

/// Imports an ONNX model held in memory. `file_name` names it in errors and
/// gives the graph its name when the model's graph has none.
pub fn import_onnx(bytes: &[u8], file_name: &str) -> Result<Graph, OnnxError> {
    let model = proto::ModelProto::decode(bytes).map_err(|e| OnnxError::Decode {
        file: file_name.to_string(),
        message: e.to_string(),
    })?;
    import_model_proto(&model, file_name)
}

/// Imports an already decoded `ModelProto`, so tools (the conformance
/// runner) can adjust a model, e.g. pin its input shapes, before import.
pub fn import_model_proto(model: &proto::ModelProto, file_name: &str) -> Result<Graph, OnnxError> {
    // The importer validates what it reads, but a malformed model must
    // never take the process down: a panic is reported as an internal error.
    let run = || import::import_model(model, file_name);
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

/// Decodes a `TensorProto` (an initializer, or a test-data `.pb` file) into
/// a dnnc tensor. `Ok(None)` means its data type has no dnnc equivalent;
/// INT32 data comes back as i64 and DOUBLE as f32, as in the importer.
pub fn decode_tensor_proto(
    tp: &proto::TensorProto,
    name: &str,
) -> Result<Option<Tensor>, OnnxError> {
    match decode::decode_tensor(tp, name)? {
        decode::Decoded::Ok(k) => Ok(Some(k.t)),
        decode::Decoded::UnsupportedDtype(_) => Ok(None),
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
