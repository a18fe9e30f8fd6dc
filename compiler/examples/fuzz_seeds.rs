//! Writes a compact fuzzing seed of each ONNX model given: large float
//! initializers become graph inputs of the same shape, so the seed keeps
//! the whole graph structure (every node, attribute and small constant)
//! at a few kilobytes, which libFuzzer can mutate quickly.
//!
//! `cargo run -p dnnc-compiler --example fuzz_seeds -- OUT_DIR MODEL.onnx...`

use dnnc_compiler::onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto, type_proto, ModelProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};
use prost::Message;
use std::path::Path;

/// Float initializers with more elements than this become graph inputs.
const KEEP: i64 = 256;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((out, models)) = args.split_first() else {
        eprintln!("usage: fuzz_seeds OUT_DIR MODEL.onnx...");
        std::process::exit(2);
    };
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("cannot create `{out}`: {e}");
        std::process::exit(2);
    }
    for m in models {
        let path = Path::new(m);
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("skip `{m}`: {e}");
                continue;
            }
        };
        let Ok(mut model) = ModelProto::decode(bytes.as_slice()) else {
            eprintln!("skip `{m}`: not a ModelProto");
            continue;
        };
        if let Some(g) = model.graph.as_mut() {
            let inits = std::mem::take(&mut g.initializer);
            for t in inits {
                let numel: i64 = t.dims.iter().product();
                if t.data_type == Some(DataType::Float as i32) && numel > KEEP {
                    if !g.input.iter().any(|i| i.name() == t.name()) {
                        g.input.push(value_info(t.name(), &t.dims));
                    }
                } else {
                    g.initializer.push(t);
                }
            }
        }
        // Name the seed after the model's folder (`models/resnet18/model.onnx`).
        let stem = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into());
        let dest = Path::new(out).join(format!("{stem}.onnx"));
        let seed = model.encode_to_vec();
        match std::fs::write(&dest, &seed) {
            Ok(()) => println!(
                "{} ({} bytes, from {})",
                dest.display(),
                seed.len(),
                bytes.len()
            ),
            Err(e) => eprintln!("cannot write `{}`: {e}", dest.display()),
        }
    }
}

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}
