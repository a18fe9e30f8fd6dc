//! Model loading: the frontend dispatch by file type.

use crate::error::DnncError;
use dnnc_ir::Graph;
use std::path::Path;

/// Loads a model file into a verified graph: `.onnx` goes through the ONNX
/// frontend, anything else is read as the native text format.
pub fn load_model(path: &Path) -> Result<Graph, DnncError> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("onnx") {
        let g = crate::onnx::import_onnx_file(path)?;
        dnnc_ir::verify(&g).map_err(DnncError::Verify)?;
        return Ok(g);
    }
    let bytes = std::fs::read(path).map_err(|source| DnncError::Io {
        action: "read",
        path: path.display().to_string(),
        source,
    })?;
    let src = String::from_utf8(bytes).map_err(|e| {
        DnncError::Usage(format!(
            "`{}` is not UTF-8 text (invalid byte at offset {}); is it a text model?",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })?;
    load_model_str(&src, &path.display().to_string())
}

/// Parses and verifies a text model held in memory. `file_name` is used in
/// error messages.
pub fn load_model_str(src: &str, file_name: &str) -> Result<Graph, DnncError> {
    let g = dnnc_ir::text::parse(src, file_name)?;
    dnnc_ir::verify(&g).map_err(DnncError::Verify)?;
    Ok(g)
}
