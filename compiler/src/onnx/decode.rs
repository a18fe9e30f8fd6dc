//! Decoding of protobuf pieces into dnnc values: tensors (with size checks),
//! attributes, and graph-input types.

use super::error::OnnxError;
use super::proto::{
    attribute_proto::AttributeType, tensor_proto::DataLocation, tensor_proto::DataType,
    tensor_shape_proto::dimension, type_proto, AttributeProto, TensorProto, ValueInfoProto,
};
use dnnc_ir::{DType, Tensor, TensorType};
use ndarray::{ArrayD, IxDyn};
use std::collections::BTreeMap;

/// Largest element count dnnc accepts for one tensor type (2^40), so shape
/// arithmetic can never overflow `usize`.
pub(crate) const MAX_ELEMENTS: u128 = 1 << 40;

/// A tensor whose value is known at import time, with the ONNX dtype it came
/// from (INT32 and DOUBLE data is held as i64 and f32).
#[derive(Clone, Debug)]
pub(crate) struct Known {
    pub t: Tensor,
    pub orig: DataType,
}

impl Known {
    pub fn new(t: Tensor) -> Self {
        let orig = match t.dtype() {
            DType::F32 => DataType::Float,
            DType::I64 => DataType::Int64,
            DType::Bool => DataType::Bool,
        };
        Known { t, orig }
    }

    /// Values as f32 (any dtype).
    pub fn f32s(&self) -> Vec<f32> {
        match &self.t {
            Tensor::F32(a) => a.iter().copied().collect(),
            Tensor::I64(a) => a.iter().map(|&v| v as f32).collect(),
            Tensor::Bool(a) => a.iter().map(|&b| b as i64 as f32).collect(),
        }
    }
}

/// ONNX's spelling of a data type code.
pub(crate) fn dtype_name(code: i32) -> String {
    match DataType::try_from(code) {
        Ok(d) => d.as_str_name().to_string(),
        Err(_) => format!("data type {code}"),
    }
}

/// Outcome of decoding a tensor: a value, or a dtype dnnc has no use for
/// (reported only if something reads the tensor).
pub(crate) enum Decoded {
    Ok(Known),
    UnsupportedDtype(String),
}

fn checked_dims(name: &str, dims: &[i64]) -> Result<(Vec<usize>, u64), OnnxError> {
    let mut n: u128 = 1;
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        if d < 0 {
            return Err(OnnxError::Tensor {
                tensor: name.into(),
                message: format!("dims {dims:?} contain a negative dimension"),
            });
        }
        n = n.saturating_mul(d as u128);
        out.push(d as usize);
    }
    if n > MAX_ELEMENTS {
        return Err(OnnxError::Tensor {
            tensor: name.into(),
            message: format!("dims {dims:?} describe more than 2^40 elements"),
        });
    }
    Ok((out, n as u64))
}

/// Decodes an initializer or attribute tensor, checking its element count.
pub(crate) fn decode_tensor(tp: &TensorProto, name: &str) -> Result<Decoded, OnnxError> {
    if tp.data_location == Some(DataLocation::External as i32) || !tp.external_data.is_empty() {
        return Err(OnnxError::ExternalData {
            tensor: name.into(),
        });
    }
    let (dims, numel) = checked_dims(name, &tp.dims)?;
    let code = tp.data_type.unwrap_or(0);
    let dt = match DataType::try_from(code) {
        Ok(
            d @ (DataType::Float
            | DataType::Int64
            | DataType::Int32
            | DataType::Bool
            | DataType::Double),
        ) => d,
        _ => return Ok(Decoded::UnsupportedDtype(dtype_name(code))),
    };
    let size_err = |field: &'static str, found: u64| OnnxError::TensorSize {
        tensor: name.into(),
        dims: tp.dims.clone(),
        expected: numel,
        found,
        field,
    };
    let elem = match dt {
        DataType::Float | DataType::Int32 => 4,
        DataType::Int64 | DataType::Double => 8,
        _ => 1,
    };
    let raw = tp.raw_data.as_deref();
    if let Some(raw) = raw {
        if raw.len() as u64 != numel * elem {
            if raw.len() % elem as usize != 0 {
                return Err(OnnxError::Tensor {
                    tensor: name.into(),
                    message: format!(
                        "raw_data has {} bytes, not a multiple of the {elem}-byte {} element",
                        raw.len(),
                        dt.as_str_name()
                    ),
                });
            }
            return Err(size_err("raw_data", raw.len() as u64 / elem));
        }
    }
    let shape = IxDyn(&dims);
    let build = |t: Result<Tensor, ndarray::ShapeError>| {
        t.map_err(|e| OnnxError::Tensor {
            tensor: name.into(),
            message: e.to_string(),
        })
    };
    let check = |field: &'static str, len: usize| {
        if len as u64 != numel {
            Err(size_err(field, len as u64))
        } else {
            Ok(())
        }
    };
    let t = match (dt, raw) {
        (DataType::Float, Some(r)) => build(
            ArrayD::from_shape_vec(
                shape,
                r.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            )
            .map(Tensor::F32),
        )?,
        (DataType::Double, Some(r)) => build(
            ArrayD::from_shape_vec(
                shape,
                r.chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
                    .collect(),
            )
            .map(Tensor::F32),
        )?,
        (DataType::Int64, Some(r)) => build(
            ArrayD::from_shape_vec(
                shape,
                r.chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            )
            .map(Tensor::I64),
        )?,
        (DataType::Int32, Some(r)) => build(
            ArrayD::from_shape_vec(
                shape,
                r.chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
            )
            .map(Tensor::I64),
        )?,
        (DataType::Bool, Some(r)) => build(
            ArrayD::from_shape_vec(shape, r.iter().map(|&b| b != 0).collect()).map(Tensor::Bool),
        )?,
        (DataType::Float, None) => {
            check("float_data", tp.float_data.len())?;
            build(ArrayD::from_shape_vec(shape, tp.float_data.clone()).map(Tensor::F32))?
        }
        (DataType::Double, None) => {
            check("double_data", tp.double_data.len())?;
            build(
                ArrayD::from_shape_vec(shape, tp.double_data.iter().map(|&v| v as f32).collect())
                    .map(Tensor::F32),
            )?
        }
        (DataType::Int64, None) => {
            check("int64_data", tp.int64_data.len())?;
            build(ArrayD::from_shape_vec(shape, tp.int64_data.clone()).map(Tensor::I64))?
        }
        (DataType::Int32, None) => {
            check("int32_data", tp.int32_data.len())?;
            build(
                ArrayD::from_shape_vec(shape, tp.int32_data.iter().map(|&v| v as i64).collect())
                    .map(Tensor::I64),
            )?
        }
        (_, None) => {
            check("int32_data", tp.int32_data.len())?;
            build(
                ArrayD::from_shape_vec(shape, tp.int32_data.iter().map(|&v| v != 0).collect())
                    .map(Tensor::Bool),
            )?
        }
        _ => unreachable!("dtype filtered above"),
    };
    Ok(Decoded::Ok(Known { t, orig: dt }))
}

/// A decoded node attribute.
#[derive(Clone, Debug)]
pub(crate) enum Attr {
    Float(f32),
    Int(i64),
    Str(String),
    Tensor(Box<TensorProto>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strs(Vec<String>),
    /// GRAPH, SPARSE_TENSOR, TYPE_PROTO and lists of them.
    Other(&'static str),
}

impl Attr {
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Float(_) => "FLOAT",
            Attr::Int(_) => "INT",
            Attr::Str(_) => "STRING",
            Attr::Tensor(_) => "TENSOR",
            Attr::Floats(_) => "FLOATS",
            Attr::Ints(_) => "INTS",
            Attr::Strs(_) => "STRINGS",
            Attr::Other(k) => k,
        }
    }
}

fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Decodes one attribute; the type comes from `type`, or from whichever
/// field is set for old models that omit it.
pub(crate) fn decode_attr(a: &AttributeProto) -> Attr {
    use AttributeType as T;
    let ty = match a.r#type.and_then(|t| T::try_from(t).ok()) {
        Some(T::Undefined) | None => {
            if a.f.is_some() {
                T::Float
            } else if a.i.is_some() {
                T::Int
            } else if a.s.is_some() {
                T::String
            } else if a.t.is_some() {
                T::Tensor
            } else if a.g.is_some() {
                T::Graph
            } else if !a.floats.is_empty() {
                T::Floats
            } else if !a.ints.is_empty() {
                T::Ints
            } else if !a.strings.is_empty() {
                T::Strings
            } else if !a.graphs.is_empty() {
                T::Graphs
            } else {
                T::Undefined
            }
        }
        Some(t) => t,
    };
    match ty {
        T::Float => Attr::Float(a.f.unwrap_or(0.0)),
        T::Int => Attr::Int(a.i.unwrap_or(0)),
        T::String => Attr::Str(utf8(a.s.as_deref().unwrap_or(&[]))),
        T::Tensor => Attr::Tensor(Box::new(a.t.clone().unwrap_or_default())),
        T::Floats => Attr::Floats(a.floats.clone()),
        T::Ints => Attr::Ints(a.ints.clone()),
        T::Strings => Attr::Strs(a.strings.iter().map(|b| utf8(b)).collect()),
        T::Graph => Attr::Other("GRAPH"),
        T::Graphs => Attr::Other("GRAPHS"),
        T::SparseTensor | T::SparseTensors => Attr::Other("SPARSE_TENSOR"),
        T::TypeProto | T::TypeProtos => Attr::Other("TYPE_PROTO"),
        T::Tensors => Attr::Other("TENSORS"),
        T::Undefined => Attr::Other("UNDEFINED"),
    }
}

/// A node's attributes. Reads consume keys, so leftovers (attributes dnnc
/// does not understand) can be reported rather than silently ignored.
#[derive(Default)]
pub(crate) struct Attrs {
    map: BTreeMap<String, Attr>,
}

/// An unsupported-attribute reason.
pub(crate) type Why = String;

impl Attrs {
    pub fn new(attrs: &[AttributeProto]) -> Result<Self, Why> {
        let mut map = BTreeMap::new();
        for a in attrs {
            let name = a.name.clone().unwrap_or_default();
            if a.ref_attr_name.as_deref().is_some_and(|r| !r.is_empty()) {
                return Err(format!(
                    "attribute `{name}` refers to a function attribute, which only functions may do"
                ));
            }
            map.insert(name, decode_attr(a));
        }
        Ok(Attrs { map })
    }

    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    fn take(&mut self, key: &str) -> Option<Attr> {
        self.map.remove(key)
    }

    fn wrong(key: &str, want: &str, a: &Attr) -> Why {
        format!("attribute `{key}` should be {want}, found {}", a.kind())
    }

    pub fn int_opt(&mut self, key: &str) -> Result<Option<i64>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(v)),
            Some(a) => Err(Self::wrong(key, "INT", &a)),
        }
    }

    pub fn int(&mut self, key: &str, default: i64) -> Result<i64, Why> {
        Ok(self.int_opt(key)?.unwrap_or(default))
    }

    pub fn flag(&mut self, key: &str, default: bool) -> Result<bool, Why> {
        match self.int(key, default as i64)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("attribute `{key}` must be 0 or 1, found {v}")),
        }
    }

    pub fn float_opt(&mut self, key: &str) -> Result<Option<f32>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Float(v)) => Ok(Some(v)),
            Some(Attr::Int(v)) => Ok(Some(v as f32)),
            Some(a) => Err(Self::wrong(key, "FLOAT", &a)),
        }
    }

    pub fn float(&mut self, key: &str, default: f32) -> Result<f32, Why> {
        Ok(self.float_opt(key)?.unwrap_or(default))
    }

    pub fn ints_opt(&mut self, key: &str) -> Result<Option<Vec<i64>>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(Attr::Int(v)) => Ok(Some(vec![v])),
            Some(a) => Err(Self::wrong(key, "INTS", &a)),
        }
    }

    pub fn floats_opt(&mut self, key: &str) -> Result<Option<Vec<f32>>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v)),
            Some(Attr::Float(v)) => Ok(Some(vec![v])),
            Some(a) => Err(Self::wrong(key, "FLOATS", &a)),
        }
    }

    pub fn string(&mut self, key: &str, default: &str) -> Result<String, Why> {
        match self.take(key) {
            None => Ok(default.to_string()),
            Some(Attr::Str(s)) => Ok(s),
            Some(a) => Err(Self::wrong(key, "STRING", &a)),
        }
    }

    pub fn strings_opt(&mut self, key: &str) -> Result<Option<Vec<String>>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Strs(v)) => Ok(Some(v)),
            Some(Attr::Str(s)) => Ok(Some(vec![s])),
            Some(a) => Err(Self::wrong(key, "STRINGS", &a)),
        }
    }

    pub fn tensor_opt(&mut self, key: &str) -> Result<Option<Box<TensorProto>>, Why> {
        match self.take(key) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(a) => Err(Self::wrong(key, "TENSOR", &a)),
        }
    }

    /// Takes any attribute (for ones whose value only needs to be allowed).
    pub fn take_any(&mut self, key: &str) -> Option<Attr> {
        self.take(key)
    }

    /// Fails on the first attribute nothing read.
    pub fn finish(self, op_type: &str) -> Result<(), Why> {
        match self.map.into_iter().next() {
            None => Ok(()),
            Some((k, Attr::Other(kind))) => Err(format!(
                "attribute `{k}` is a {kind}, which dnnc does not support (subgraphs, sparse tensors and type attributes)"
            )),
            Some((k, _)) => Err(format!("attribute `{k}` of {op_type} is not supported")),
        }
    }
}

/// The static type of a graph input, or an error naming the input.
pub(crate) fn input_type(vi: &ValueInfoProto) -> Result<TensorType, OnnxError> {
    let name = vi.name.clone().unwrap_or_default();
    let bad = |message: String| OnnxError::InputType {
        input: name.clone(),
        message,
    };
    let Some(type_proto::Value::TensorType(tt)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(bad(
            "has no tensor type (sequences, maps and optionals are not supported)".into(),
        ));
    };
    let code = tt.elem_type.unwrap_or(0);
    let dtype = match DataType::try_from(code) {
        Ok(DataType::Float) => DType::F32,
        Ok(DataType::Int64) => DType::I64,
        Ok(DataType::Bool) => DType::Bool,
        _ => {
            return Err(bad(format!(
                "element type {} is not supported; dnnc inputs are FLOAT, INT64 or BOOL",
                dtype_name(code)
            )))
        }
    };
    let Some(shape) = &tt.shape else {
        return Err(bad(
            "has no shape; dnnc compiles static shapes only: re-export the model with fixed input shapes".into(),
        ));
    };
    let mut dims = Vec::with_capacity(shape.dim.len());
    let mut n: u128 = 1;
    for (axis, d) in shape.dim.iter().enumerate() {
        match &d.value {
            Some(dimension::Value::DimValue(v)) if *v >= 0 => {
                n = n.saturating_mul(*v as u128);
                dims.push(*v as usize)
            }
            Some(dimension::Value::DimValue(v)) => {
                return Err(bad(format!("dimension {v} at axis {axis} is negative")))
            }
            Some(dimension::Value::DimParam(p)) => {
                return Err(OnnxError::DynamicInput {
                    input: name,
                    axis,
                    what: format!("symbolic dimension \"{p}\""),
                })
            }
            None => {
                return Err(OnnxError::DynamicInput {
                    input: name,
                    axis,
                    what: "an unknown dimension".into(),
                })
            }
        }
    }
    if n > MAX_ELEMENTS {
        return Err(bad(format!("shape {dims:?} has more than 2^40 elements")));
    }
    Ok(TensorType::new(dtype, dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(dt: DataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: Some("t".into()),
            dims: dims.to_vec(),
            data_type: Some(dt as i32),
            ..Default::default()
        }
    }

    fn ok(t: &TensorProto) -> Known {
        match decode_tensor(t, "t").unwrap() {
            Decoded::Ok(k) => k,
            Decoded::UnsupportedDtype(d) => panic!("{d}"),
        }
    }

    #[test]
    fn typed_fields_and_raw_data_decode_alike() {
        let mut a = tp(DataType::Float, &[2]);
        a.float_data = vec![1.5, -2.0];
        let mut b = tp(DataType::Float, &[2]);
        b.raw_data = Some(
            [1.5f32, -2.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect(),
        );
        assert_eq!(ok(&a).t, ok(&b).t);
        let mut i32raw = tp(DataType::Int32, &[2]);
        i32raw.raw_data = Some([-7i32, 9].iter().flat_map(|x| x.to_le_bytes()).collect());
        let k = ok(&i32raw);
        assert_eq!((k.orig, k.t.dtype()), (DataType::Int32, DType::I64));
        assert_eq!(
            k.t.as_i64().unwrap().iter().copied().collect::<Vec<_>>(),
            vec![-7, 9]
        );
        let mut boolean = tp(DataType::Bool, &[3]);
        boolean.int32_data = vec![1, 0, 1];
        assert_eq!(
            ok(&boolean)
                .t
                .as_bool()
                .unwrap()
                .iter()
                .filter(|&&b| b)
                .count(),
            2
        );
        let mut d = tp(DataType::Double, &[]);
        d.raw_data = Some(0.25f64.to_le_bytes().to_vec());
        assert_eq!(ok(&d).f32s(), vec![0.25]);
    }

    #[test]
    fn sizes_dtypes_and_locations_are_checked() {
        let mut short = tp(DataType::Int64, &[3]);
        short.int64_data = vec![1, 2];
        let e = decode_tensor(&short, "t").err().unwrap().to_string();
        assert!(e.contains("int64_data holds 2"), "{e}");
        let mut ragged = tp(DataType::Float, &[1]);
        ragged.raw_data = Some(vec![0; 5]);
        assert!(decode_tensor(&ragged, "t").is_err());
        assert!(decode_tensor(&tp(DataType::Float, &[-1]), "t").is_err());
        assert!(decode_tensor(&tp(DataType::Float, &[1 << 30, 1 << 30]), "t").is_err());
        assert!(matches!(
            decode_tensor(&tp(DataType::Uint8, &[1]), "t").unwrap(),
            Decoded::UnsupportedDtype(d) if d == "UINT8"
        ));
        let mut ext = tp(DataType::Float, &[1]);
        ext.data_location = Some(DataLocation::External as i32);
        assert!(matches!(
            decode_tensor(&ext, "t"),
            Err(OnnxError::ExternalData { .. })
        ));
    }

    #[test]
    fn attributes_without_type_field_are_inferred_and_leftovers_reported() {
        let a = AttributeProto {
            name: Some("k".into()),
            ints: vec![3, 3],
            ..Default::default()
        };
        let b = AttributeProto {
            name: Some("weird".into()),
            f: Some(1.0),
            ..Default::default()
        };
        let mut attrs = Attrs::new(&[a, b]).unwrap();
        assert_eq!(attrs.ints_opt("k").unwrap(), Some(vec![3, 3]));
        assert!(attrs
            .int_opt("weird")
            .unwrap_err()
            .contains("should be INT"));
        let c = AttributeProto {
            name: Some("extra".into()),
            i: Some(1),
            ..Default::default()
        };
        let e = Attrs::new(&[c]).unwrap().finish("Relu").unwrap_err();
        assert_eq!(e, "attribute `extra` of Relu is not supported");
    }
}
