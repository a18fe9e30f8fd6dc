//! Concrete tensor data: the weight store and the file formats it loads from.
//!
//! Weights live here, keyed by value name, never inside op attributes, so the
//! graph stays small to print, hash and rewrite while the data is shared.

use crate::types::{DType, TensorType};
use ndarray::ArrayD;
use std::collections::BTreeMap;
use std::path::Path;

/// A dense tensor of one of the IR's dtypes.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    /// f32 data.
    F32(ArrayD<f32>),
    /// i64 data.
    I64(ArrayD<i64>),
    /// bool data.
    Bool(ArrayD<bool>),
}

impl Tensor {
    /// The tensor's element type.
    pub fn dtype(&self) -> DType {
        match self {
            Tensor::F32(_) => DType::F32,
            Tensor::I64(_) => DType::I64,
            Tensor::Bool(_) => DType::Bool,
        }
    }

    /// The tensor's shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Tensor::F32(a) => a.shape(),
            Tensor::I64(a) => a.shape(),
            Tensor::Bool(a) => a.shape(),
        }
    }

    /// The static type this tensor satisfies.
    pub fn ty(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape().to_vec())
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// Borrows f32 data, or `None` for another dtype.
    pub fn as_f32(&self) -> Option<&ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a),
            _ => None,
        }
    }

    /// Borrows i64 data, or `None` for another dtype.
    pub fn as_i64(&self) -> Option<&ArrayD<i64>> {
        match self {
            Tensor::I64(a) => Some(a),
            _ => None,
        }
    }

    /// Borrows bool data, or `None` for another dtype.
    pub fn as_bool(&self) -> Option<&ArrayD<bool>> {
        match self {
            Tensor::Bool(a) => Some(a),
            _ => None,
        }
    }

    /// Takes f32 data, or `None` for another dtype.
    pub fn into_f32(self) -> Option<ArrayD<f32>> {
        match self {
            Tensor::F32(a) => Some(a),
            _ => None,
        }
    }
}

impl From<ArrayD<f32>> for Tensor {
    fn from(a: ArrayD<f32>) -> Self {
        Tensor::F32(a)
    }
}

impl From<ArrayD<i64>> for Tensor {
    fn from(a: ArrayD<i64>) -> Self {
        Tensor::I64(a)
    }
}

impl From<ArrayD<bool>> for Tensor {
    fn from(a: ArrayD<bool>) -> Self {
        Tensor::Bool(a)
    }
}

/// Named tensors backing `param` and `const` values. Keyed by value name.
/// Tensors are shared (`Arc`), so cloning a graph, as a backend does to
/// rewrite its own copy, does not copy its weights (ResNet-18's 45 MB
/// showed up in peak RSS).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WeightStore {
    tensors: BTreeMap<String, std::sync::Arc<Tensor>>,
}

impl WeightStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks a tensor up by value name.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.get(name).map(|t| &**t)
    }

    /// Inserts or replaces a tensor.
    pub fn insert(&mut self, name: impl Into<String>, t: Tensor) {
        self.tensors.insert(name.into(), std::sync::Arc::new(t));
    }

    /// Removes a tensor, returning it.
    pub fn remove(&mut self, name: &str) -> Option<Tensor> {
        self.tensors
            .remove(name)
            .map(|t| std::sync::Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone()))
    }

    /// Whether a tensor of this name is present.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// All tensors in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Tensor)> {
        self.tensors.iter().map(|(k, t)| (k, &**t))
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

/// Errors reading or writing tensor files. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TensorIoError {
    /// The file could not be opened or read.
    #[error("cannot read `{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a valid .npy array of a supported dtype.
    #[error("`{path}` is not a readable .npy array: {message}")]
    Npy {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The file is not a valid safetensors file, or holds an unsupported dtype.
    #[error("`{path}` is not a readable safetensors file: {message}")]
    Safetensors {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Writing a file failed.
    #[error("cannot write `{path}`: {message}")]
    Write {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// Reads a .npy file holding float32, int64 or bool data.
pub fn read_npy(path: &Path) -> Result<Tensor, TensorIoError> {
    use ndarray_npy::{ReadNpyError, ReadNpyExt};
    let bytes = std::fs::read(path).map_err(|source| TensorIoError::Io {
        path: display(path),
        source,
    })?;
    let npy_err = |message: String| TensorIoError::Npy {
        path: display(path),
        message,
    };
    let describe = |e: ReadNpyError| -> String {
        match e {
            ReadNpyError::WrongDescriptor(d) => {
                format!("unsupported element type {d}; expected float32, int64 or bool")
            }
            other => other.to_string(),
        }
    };
    match ArrayD::<f32>::read_npy(&bytes[..]) {
        Ok(a) => return Ok(Tensor::F32(a)),
        Err(ReadNpyError::WrongDescriptor(_)) => {}
        Err(e) => return Err(npy_err(describe(e))),
    }
    match ArrayD::<i64>::read_npy(&bytes[..]) {
        Ok(a) => return Ok(Tensor::I64(a)),
        Err(ReadNpyError::WrongDescriptor(_)) => {}
        Err(e) => return Err(npy_err(describe(e))),
    }
    ArrayD::<bool>::read_npy(&bytes[..])
        .map(Tensor::Bool)
        .map_err(|e| npy_err(describe(e)))
}

/// Writes a tensor as .npy (C order).
pub fn write_npy(path: &Path, t: &Tensor) -> Result<(), TensorIoError> {
    use ndarray_npy::WriteNpyExt;
    let werr = |message: String| TensorIoError::Write {
        path: display(path),
        message,
    };
    let file = std::fs::File::create(path).map_err(|e| werr(e.to_string()))?;
    let w = std::io::BufWriter::new(file);
    let r = match t {
        Tensor::F32(a) => a.as_standard_layout().write_npy(w),
        Tensor::I64(a) => a.as_standard_layout().write_npy(w),
        Tensor::Bool(a) => a.as_standard_layout().write_npy(w),
    };
    r.map_err(|e| werr(e.to_string()))
}

/// Reads every tensor of a safetensors file, in file order.
pub fn read_safetensors(path: &Path) -> Result<Vec<(String, Tensor)>, TensorIoError> {
    use safetensors::{Dtype, SafeTensors};
    let bytes = std::fs::read(path).map_err(|source| TensorIoError::Io {
        path: display(path),
        source,
    })?;
    let st_err = |message: String| TensorIoError::Safetensors {
        path: display(path),
        message,
    };
    let st = SafeTensors::deserialize(&bytes).map_err(|e| st_err(e.to_string()))?;
    let mut names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let view = st.tensor(&name).map_err(|e| st_err(e.to_string()))?;
        let shape = view.shape().to_vec();
        let data = view.data();
        let t = match view.dtype() {
            Dtype::F32 => {
                let v: Vec<f32> = data
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Tensor::F32(ArrayD::from_shape_vec(shape, v).map_err(|e| st_err(e.to_string()))?)
            }
            Dtype::I64 => {
                let v: Vec<i64> = data
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("chunk of 8")))
                    .collect();
                Tensor::I64(ArrayD::from_shape_vec(shape, v).map_err(|e| st_err(e.to_string()))?)
            }
            Dtype::BOOL => {
                let v: Vec<bool> = data.iter().map(|&b| b != 0).collect();
                Tensor::Bool(ArrayD::from_shape_vec(shape, v).map_err(|e| st_err(e.to_string()))?)
            }
            other => {
                return Err(st_err(format!(
                    "tensor `{name}` has unsupported dtype {other:?}; expected F32, I64 or BOOL"
                )))
            }
        };
        out.push((name, t));
    }
    Ok(out)
}
