//! `dnnc onnx-test`: exit codes (0 all passed or unsupported, 1 a failure,
//! 2 usage errors), the per-test lines and the closing summary line, on
//! test folders written here from prost-built models.

use dnnc_compiler::onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("dnnc-onnx-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn dnnc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dnnc"))
        .args(args)
        .output()
        .expect("run dnnc")
}

fn vi(name: &str, dt: DataType, dims: &[i64]) -> ValueInfoProto {
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
                elem_type: Some(dt as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tensor(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

/// Writes a one-node `op` test (x → y, shape [2, 3]) whose expected output
/// is `expected`, with the input given as a DOUBLE graph input if `double`.
fn write_test(dir: &Path, op: &str, expected: &[f32], double: bool) {
    let dt = if double {
        DataType::Double
    } else {
        DataType::Float
    };
    let model = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![NodeProto {
                op_type: Some(op.into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![vi("x", dt, &[2, 3])],
            output: vec![vi("y", dt, &[2, 3])],
            ..Default::default()
        }),
        ..Default::default()
    };
    std::fs::create_dir_all(dir.join("test_data_set_0")).unwrap();
    std::fs::write(dir.join("model.onnx"), model.encode_to_vec()).unwrap();
    let x = tensor("x", &[2, 3], &[-1.0, 2.0, -3.0, 4.0, -5.0, 6.0]);
    std::fs::write(dir.join("test_data_set_0/input_0.pb"), x.encode_to_vec()).unwrap();
    std::fs::write(
        dir.join("test_data_set_0/output_0.pb"),
        tensor("y", &[2, 3], expected).encode_to_vec(),
    )
    .unwrap();
}

const RELU: [f32; 6] = [0.0, 2.0, 0.0, 4.0, 0.0, 6.0];

#[test]
fn one_passing_test_folder() {
    let d = scratch("pass");
    let t = d.join("test_relu");
    write_test(&t, "Relu", &RELU, false);
    let out = dnnc(&["onnx-test", t.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.starts_with("pass test_relu"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("1 passed, 0 failed, 0 unsupported")
    );
}

#[test]
fn folder_of_tests_mixes_pass_fail_and_unsupported() {
    let d = scratch("mixed");
    write_test(&d.join("test_a_relu"), "Relu", &RELU, false);
    let mut wrong = RELU;
    wrong[5] = 6.1;
    write_test(&d.join("test_b_wrong"), "Relu", &wrong, false);
    write_test(&d.join("test_c_double"), "Relu", &RELU, true);
    std::fs::create_dir_all(d.join("not_a_test")).unwrap();
    let out = dnnc(&["onnx-test", d.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with("pass test_a_relu"), "{stdout}");
    assert!(
        lines[1].starts_with("FAIL test_b_wrong") && lines[1].contains("max abs err 1.0"),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("unsupported test_c_double") && lines[2].contains("DOUBLE"),
        "{stdout}"
    );
    assert_eq!(lines[3], "1 passed, 1 failed, 1 unsupported");
}

#[test]
fn usage_errors_exit_2() {
    let d = scratch("usage");
    let missing = d.join("missing");
    let out = dnnc(&["onnx-test", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a directory"), "{err}");

    let out = dnnc(&["onnx-test", d.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("contains no ONNX test"), "{err}");

    let out = dnnc(&["onnx-test"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn garbage_test_data_is_a_failure_not_a_crash() {
    let d = scratch("garbage");
    let t = d.join("test_garbage");
    write_test(&t, "Relu", &RELU, false);
    std::fs::write(t.join("test_data_set_0/output_0.pb"), [0xffu8, 0xff, 0x01]).unwrap();
    let out = dnnc(&["onnx-test", t.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.starts_with("FAIL test_garbage"), "{stdout}");
}
