//! Element types and static tensor types carried on every IR value.

use std::fmt;

/// Element type of a tensor. f32 is the working type; i64 and bool exist for
/// shape, index and mask computations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 single precision, the type all arithmetic kernels target.
    F32,
    /// Signed 64-bit integer, used for indices and shapes (ONNX's int64).
    I64,
    /// Boolean masks.
    Bool,
}

impl DType {
    /// The spelling used by the text format (`f32`, `i64`, `bool`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }

    /// Parses the text-format spelling.
    pub fn from_name(s: &str) -> Option<DType> {
        match s {
            "f32" => Some(DType::F32),
            "i64" => Some(DType::I64),
            "bool" => Some(DType::Bool),
            _ => None,
        }
    }

    /// Bytes per element, for memory accounting.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::I64 => 8,
            DType::Bool => 1,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype plus a fully static shape. Every edge of the graph carries one, so
/// every pass and backend can size buffers without running anything.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Static dimensions, outermost first (NCHW for images). Empty = scalar.
    pub shape: Vec<usize>,
}

impl TensorType {
    /// Builds a type from a dtype and shape.
    pub fn new(dtype: DType, shape: impl Into<Vec<usize>>) -> Self {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    /// Shorthand for the common f32 case.
    pub fn f32(shape: impl Into<Vec<usize>>) -> Self {
        Self::new(DType::F32, shape)
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Size in bytes of a dense buffer of this type.
    pub fn size_bytes(&self) -> usize {
        self.numel() * self.dtype.size_bytes()
    }
}

impl fmt::Display for TensorType {
    /// Prints `f32[1,3,224,224]`, the text-format spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
