//! Errors of the ONNX frontend. Every message names what the user has to
//! look at (file, tensor, input or node) and, where there is one, the fix.

use dnnc_ir::GraphError;
use std::fmt;

/// One node dnnc cannot import, with the reason. Import collects all of
/// them so a user sees the whole list of missing features at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedNode {
    /// The node's name, or `<op_type> #<index>` when it has none.
    pub node: String,
    /// ONNX op type, e.g. `Resize`.
    pub op_type: String,
    /// Operator set domain (`ai.onnx` for the default one).
    pub domain: String,
    /// The model's opset version for that domain (0 if it imports none).
    pub opset: i64,
    /// What is missing or not supported.
    pub reason: String,
}

impl fmt::Display for UnsupportedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node `{}` ({} from {} opset {}): {}",
            self.node, self.op_type, self.domain, self.opset, self.reason
        )
    }
}

/// Why an ONNX model could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The model file could not be read.
    #[error("cannot read `{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bytes are not a ModelProto.
    #[error("`{file}` is not a valid ONNX model: protobuf decoding failed ({message}); the file may be truncated or not an ONNX file")]
    Decode {
        /// The file.
        file: String,
        /// prost's description.
        message: String,
    },
    /// The ModelProto has no graph.
    #[error("`{file}` contains no graph (is it an ONNX model?)")]
    NoGraph {
        /// The file.
        file: String,
    },
    /// The graph declares no outputs, so there is nothing to compute.
    #[error("`{file}`: the graph declares no outputs")]
    NoOutputs {
        /// The file.
        file: String,
    },
    /// The default-domain opset is missing or outside the supported range.
    #[error("`{file}`: {message}")]
    Opset {
        /// The file.
        file: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// A tensor keeps its data in an external file.
    #[error("tensor `{tensor}` stores its data outside the model file (data_location EXTERNAL), which dnnc does not read; re-save the model with all tensors inside it (onnx.save(model, path, save_as_external_data=False))")]
    ExternalData {
        /// The tensor's name.
        tensor: String,
    },
    /// A tensor's data does not match its dims.
    #[error("tensor `{tensor}` has dims {dims:?} ({expected} elements) but its {field} holds {found} elements")]
    TensorSize {
        /// The tensor's name.
        tensor: String,
        /// Declared dims.
        dims: Vec<i64>,
        /// Elements the dims imply.
        expected: u64,
        /// Elements present.
        found: u64,
        /// Which field held the data (`raw_data`, `float_data`...).
        field: &'static str,
    },
    /// A tensor is malformed in another way (negative dims, overflow...).
    #[error("tensor `{tensor}`: {message}")]
    Tensor {
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        message: String,
    },
    /// A graph input has a symbolic or unknown dimension.
    #[error("input `{input}` has {what} at axis {axis}; dnnc compiles static shapes only: re-export the model with fixed input shapes (e.g. torch.onnx.export without dynamic_axes / dynamic_shapes)")]
    DynamicInput {
        /// The graph input.
        input: String,
        /// Which axis.
        axis: usize,
        /// `symbolic dimension "batch"` or `an unknown dimension`.
        what: String,
    },
    /// A graph input's type is missing or not a supported tensor type.
    #[error("input `{input}`: {message}")]
    InputType {
        /// The graph input.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A node reads a name nothing defines.
    #[error("node `{node}` ({op_type}) reads `{input}`, which no graph input, initializer or earlier node defines (nodes must be topologically sorted)")]
    Dangling {
        /// The node.
        node: String,
        /// Its op type.
        op_type: String,
        /// The undefined name.
        input: String,
    },
    /// Two definitions of one name (node outputs, inputs or initializers).
    #[error("`{name}` is defined more than once ({what})")]
    Duplicate {
        /// The name.
        name: String,
        /// Where the second definition is.
        what: String,
    },
    /// A graph output names nothing.
    #[error("graph output `{output}` is not produced by any node, input or initializer")]
    UndefinedOutput {
        /// The output name.
        output: String,
    },
    /// A node is malformed (wrong input count, inconsistent attributes...).
    #[error("node `{node}` ({op_type}): {message}")]
    Invalid {
        /// The node.
        node: String,
        /// Its op type.
        op_type: String,
        /// What is wrong.
        message: String,
    },
    /// The IR builder rejected a node (shape or dtype mismatch).
    #[error("node `{node}` ({op_type}): {source}")]
    Graph {
        /// The ONNX node.
        node: String,
        /// Its op type.
        op_type: String,
        /// The builder's error (boxed: it is large and rare).
        source: Box<GraphError>,
    },
    /// Nodes using ops, attributes or dtypes dnnc does not support.
    #[error("{} unsupported node{} in the model:\n{}", .0.len(), if .0.len() == 1 { "" } else { "s" }, render_list(.0))]
    Unsupported(Vec<UnsupportedNode>),
    /// A bug in the importer; the model may well be fine.
    #[error("internal error while importing `{file}` (please report it): {message}")]
    Internal {
        /// The file.
        file: String,
        /// The panic message.
        message: String,
    },
}

fn render_list(nodes: &[UnsupportedNode]) -> String {
    nodes
        .iter()
        .map(|n| format!("  {n}"))
        .collect::<Vec<_>>()
        .join("\n")
}
