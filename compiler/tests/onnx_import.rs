//! ONNX import: small models built with the prost types, error reporting,
//! the shared real models, and robustness against corrupted bytes.

use dnnc_compiler::onnx::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto, type_proto,
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use dnnc_compiler::onnx::{import_onnx, OnnxError};
use dnnc_ir::{DType, Graph, Op, Tensor};
use prost::Message;
use std::path::PathBuf;

// ----- model-building helpers ----------------------------------------------

fn vi(name: &str, elem: DataType, dims: &[i64]) -> ValueInfoProto {
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
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn f32s(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        raw_data: Some(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        ..Default::default()
    }
}

fn i64s(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![v.len() as i64],
        data_type: Some(DataType::Int64 as i32),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

fn attr_t(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(t),
        ..Default::default()
    }
}

fn node(
    op: &str,
    name: &str,
    ins: &[&str],
    outs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn model(
    opset: i64,
    inputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
    outputs: &[&str],
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("test".into()),
            node: nodes,
            initializer: inits,
            input: inputs,
            output: outputs
                .iter()
                .map(|o| ValueInfoProto {
                    name: Some(o.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn import(bytes: &[u8]) -> Result<Graph, OnnxError> {
    import_onnx(bytes, "test.onnx")
}

fn ops(g: &Graph) -> Vec<&'static str> {
    g.topo_order()
        .into_iter()
        .map(|n| g.node(n).op.name())
        .collect()
}

fn out_shape(g: &Graph) -> Vec<usize> {
    g.value(g.outputs()[0]).ty.shape.clone()
}

// ----- small models ----------------------------------------------------------

#[test]
fn conv_relu_gemm_imports_with_params_named_after_initializers() {
    let w: Vec<f32> = (0..2 * 3 * 3 * 3).map(|i| i as f32 * 0.01).collect();
    let bytes = model(
        17,
        vec![vi("x", DataType::Float, &[1, 3, 8, 8])],
        vec![
            f32s("conv.w", &[2, 3, 3, 3], &w),
            f32s("conv.b", &[2], &[0.1, 0.2]),
            f32s("fc.w", &[4, 32], &[0.5; 128]),
        ],
        vec![
            node(
                "Conv",
                "conv",
                &["x", "conv.w", "conv.b"],
                &["c"],
                vec![
                    attr_ints("kernel_shape", &[3, 3]),
                    attr_ints("strides", &[2, 2]),
                    attr_s("auto_pad", "SAME_UPPER"),
                ],
            ),
            node("Relu", "relu", &["c"], &["r"], vec![]),
            node("Flatten", "flat", &["r"], &["f"], vec![]),
            node(
                "Gemm",
                "fc",
                &["f", "fc.w"],
                &["y"],
                vec![attr_i("transB", 1)],
            ),
        ],
        &["y"],
    );
    let g = import(&bytes).unwrap();
    dnnc_ir::verify(&g).unwrap();
    assert_eq!(out_shape(&g), vec![1, 4]);
    assert_eq!(
        g.value(g.value_by_name("c").unwrap()).ty.shape,
        vec![1, 2, 4, 4]
    );
    let conv = g.node(g.value(g.value_by_name("c").unwrap()).producer);
    let Op::Conv2d(c) = &conv.op else { panic!() };
    // SAME_UPPER on 8 with stride 2, kernel 3: total pad 1, extra at the end.
    assert_eq!(c.pads, [0, 0, 1, 1]);
    let w = g.value_by_name("conv.w").unwrap();
    assert!(
        matches!(&g.node(g.value(w).producer).op, Op::Param(dnnc_ir::Init::External(n)) if n == "conv.w")
    );
    assert!(g.weights.contains("conv.w"));
    g.check_weights_bound().unwrap();
    assert_eq!(g.name, "test");
}

#[test]
fn shape_chain_folds_to_a_constant_reshape() {
    // y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))
    let bytes = model(
        13,
        vec![vi("x", DataType::Float, &[2, 3, 4])],
        vec![i64s("axes0", &[0]), i64s("minus1", &[-1])],
        vec![
            node("Shape", "shape", &["x"], &["s"], vec![]),
            node(
                "Constant",
                "zero",
                &[],
                &["z"],
                vec![attr_i("value_int", 0)],
            ),
            node("Gather", "g", &["s", "z"], &["d0"], vec![attr_i("axis", 0)]),
            node("Unsqueeze", "u", &["d0", "axes0"], &["d0u"], vec![]),
            node(
                "Concat",
                "cat",
                &["d0u", "minus1"],
                &["shape"],
                vec![attr_i("axis", 0)],
            ),
            node("Reshape", "reshape", &["x", "shape"], &["y"], vec![]),
        ],
        &["y"],
    );
    let g = import(&bytes).unwrap();
    dnnc_ir::verify(&g).unwrap();
    assert_eq!(ops(&g), vec!["input", "Reshape"]);
    assert_eq!(out_shape(&g), vec![2, 12]);
}

#[test]
fn opset_versions_change_attribute_sources() {
    // Clip from attributes (opset 7) and from inputs (opset 11+).
    let clip7 = model(
        7,
        vec![vi("x", DataType::Float, &[4])],
        vec![],
        vec![node(
            "Clip",
            "clip",
            &["x"],
            &["y"],
            vec![attr_f("min", 0.0), attr_f("max", 6.0)],
        )],
        &["y"],
    );
    let g = import(&clip7).unwrap();
    let y = g.outputs()[0];
    assert!(
        matches!(g.node(g.value(y).producer).op, Op::Unary(dnnc_ir::op::Unary::Clip { min, max }) if min == 0.0 && max == 6.0)
    );
    let clip13 = model(
        13,
        vec![vi("x", DataType::Float, &[4])],
        vec![f32s("lo", &[], &[0.0])],
        vec![node("Clip", "clip", &["x", "lo", ""], &["y"], vec![])],
        &["y"],
    );
    let g = import(&clip13).unwrap();
    assert!(
        matches!(g.node(g.value(g.outputs()[0]).producer).op, Op::Unary(dnnc_ir::op::Unary::Clip { min, max }) if min == 0.0 && max == f32::INFINITY)
    );
    // Unused scalar initializer consumed as an attribute is not in the IR.
    assert!(g.value_by_name("lo").is_none());

    // Softmax before 13 coerces to 2-D at axis 1.
    let sm = model(
        11,
        vec![vi("x", DataType::Float, &[2, 3, 4])],
        vec![],
        vec![node("Softmax", "sm", &["x"], &["y"], vec![])],
        &["y"],
    );
    let g = import(&sm).unwrap();
    dnnc_ir::verify(&g).unwrap();
    assert_eq!(ops(&g), vec!["input", "Flatten", "Softmax", "Reshape"]);
    assert_eq!(out_shape(&g), vec![2, 3, 4]);
}

#[test]
fn split_slice_pad_squeeze_from_inputs_and_attributes() {
    let bytes = model(
        18,
        vec![vi("x", DataType::Float, &[1, 6, 4, 4])],
        vec![
            i64s("starts", &[1]),
            i64s("ends", &[-1]),
            i64s("axes", &[2]),
            i64s("pads", &[1, 1]),
        ],
        vec![
            node(
                "Split",
                "split",
                &["x"],
                &["a", "b", "c"],
                vec![attr_i("axis", 1), attr_i("num_outputs", 3)],
            ),
            node(
                "Slice",
                "slice",
                &["a", "starts", "ends", "axes"],
                &["s"],
                vec![],
            ),
            node(
                "Pad",
                "pad",
                &["s", "pads", "", "axes"],
                &["p"],
                vec![attr_s("mode", "reflect")],
            ),
            node("Max", "max", &["p", "b", "c"], &["m"], vec![]),
        ],
        &["m"],
    );
    let g = import(&bytes).unwrap();
    dnnc_ir::verify(&g).unwrap();
    assert_eq!(out_shape(&g), vec![1, 2, 4, 4]);
    assert_eq!(ops(&g).iter().filter(|&&o| o == "Max").count(), 2);
}

#[test]
fn identity_of_initializer_stays_an_overridable_param() {
    let bytes = model(
        17,
        vec![vi("x", DataType::Float, &[2])],
        vec![f32s("b", &[2], &[1.0, 2.0])],
        vec![
            node("Identity", "id", &["b"], &["b2"], vec![]),
            node("Add", "add", &["x", "b2"], &["y"], vec![]),
        ],
        &["y"],
    );
    let g = import(&bytes).unwrap();
    let b2 = g.value_by_name("b2").unwrap();
    assert!(
        matches!(&g.node(g.value(b2).producer).op, Op::Param(dnnc_ir::Init::External(n)) if n == "b2")
    );
    assert!(g.value_by_name("b").is_none());
}

// ----- errors ----------------------------------------------------------------

#[test]
fn all_unsupported_nodes_are_reported_at_once() {
    let bytes = model(
        17,
        vec![vi("x", DataType::Float, &[1, 3, 8, 8])],
        vec![],
        vec![
            node("DepthToSpace", "up", &["x"], &["r"], vec![]),
            node("Relu", "relu", &["r"], &["a"], vec![]),
            node("NonMaxSuppression", "", &["a"], &["n"], vec![]),
            node(
                "MaxPool",
                "pool",
                &["x"],
                &["p", "idx"],
                vec![attr_ints("kernel_shape", &[2, 2])],
            ),
            node(
                "Pad",
                "pad",
                &["x", "pads"],
                &["q"],
                vec![attr_s("mode", "wrap")],
            ),
        ],
        &["n", "p", "q"],
    );
    let bytes = {
        let mut m = ModelProto::decode(&bytes[..]).unwrap();
        m.graph
            .as_mut()
            .unwrap()
            .initializer
            .push(i64s("pads", &[0; 8]));
        m.encode_to_vec()
    };
    let err = import(&bytes).unwrap_err();
    let OnnxError::Unsupported(list) = &err else {
        panic!("{err}")
    };
    let names: Vec<&str> = list.iter().map(|u| u.node.as_str()).collect();
    assert_eq!(names, vec!["up", "NonMaxSuppression #2", "pool", "pad"]);
    let text = err.to_string();
    assert!(text.starts_with("4 unsupported nodes"), "{text}");
    assert!(
        text.contains(
            "node `up` (DepthToSpace from ai.onnx opset 17): op `DepthToSpace` is not supported"
        ),
        "{text}"
    );
    assert!(text.contains("Indices"), "{text}");
    assert!(text.contains("wrap"), "{text}");
}

#[test]
fn custom_domain_and_graph_attributes_are_unsupported() {
    let mut n = node("FusedConv", "fc", &["x"], &["y"], vec![]);
    n.domain = Some("com.microsoft".into());
    let mut ifn = node("Relu", "r", &["x"], &["z"], vec![]);
    ifn.attribute.push(AttributeProto {
        name: Some("body".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(GraphProto::default()),
        ..Default::default()
    });
    let bytes = model(
        17,
        vec![vi("x", DataType::Float, &[2])],
        vec![],
        vec![n, ifn],
        &["y", "z"],
    );
    let err = import(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("domain `com.microsoft` is not supported"),
        "{err}"
    );
    assert!(err.contains("attribute `body` is a GRAPH"), "{err}");
}

#[test]
fn malformed_models_give_clear_errors() {
    let base = || {
        (
            vec![vi("x", DataType::Float, &[2])],
            vec![f32s("w", &[2], &[1.0, 2.0])],
        )
    };
    // Dangling input.
    let (i, w) = base();
    let e = import(&model(
        17,
        i,
        w,
        vec![node("Add", "add", &["x", "nope"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err();
    assert!(matches!(e, OnnxError::Dangling { .. }), "{e}");
    assert!(e.to_string().contains("`nope`"), "{e}");
    // Duplicate output names.
    let (i, w) = base();
    let e = import(&model(
        17,
        i,
        w,
        vec![
            node("Relu", "a", &["x"], &["y"], vec![]),
            node("Relu", "b", &["x"], &["y"], vec![]),
        ],
        &["y"],
    ))
    .unwrap_err();
    assert!(matches!(e, OnnxError::Duplicate { .. }), "{e}");
    // Inconsistent initializer size.
    let (i, _) = base();
    let e = import(&model(
        17,
        i,
        vec![f32s("w", &[3], &[1.0, 2.0])],
        vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("tensor `w` has dims [3] (3 elements) but its raw_data holds 2"),
        "{e}"
    );
    // External data.
    let (i, _) = base();
    let mut ext = f32s("w", &[2], &[]);
    ext.raw_data = None;
    ext.data_location = Some(1);
    let e = import(&model(
        17,
        i,
        vec![ext],
        vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err();
    assert!(
        matches!(&e, OnnxError::ExternalData { tensor } if tensor == "w"),
        "{e}"
    );
    // IR type error, wrapped with the ONNX node name.
    let (i, _) = base();
    let e = import(&model(
        17,
        i,
        vec![f32s("w", &[3], &[1.0; 3])],
        vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err();
    assert!(matches!(e, OnnxError::Graph { .. }), "{e}");
    assert!(e.to_string().starts_with("node `add` (Add)"), "{e}");
    // Symbolic input dimension.
    let mut x = vi("x", DataType::Float, &[1, 2]);
    if let Some(type_proto::Value::TensorType(t)) = x.r#type.as_mut().unwrap().value.as_mut() {
        t.shape.as_mut().unwrap().dim[0].value = Some(
            tensor_shape_proto::dimension::Value::DimParam("batch".into()),
        );
    }
    let e = import(&model(
        17,
        vec![x],
        vec![],
        vec![node("Relu", "r", &["x"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("input `x` has symbolic dimension \"batch\" at axis 0"),
        "{e}"
    );
    // Non-constant Reshape shape names the node.
    let e = import(&model(
        17,
        vec![
            vi("x", DataType::Float, &[2]),
            vi("s", DataType::Int64, &[1]),
        ],
        vec![],
        vec![node("Reshape", "rs", &["x", "s"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err()
    .to_string();
    assert!(err_has(&e, &["`rs`", "must be a constant"]), "{e}");
    // Unsupported opset and dtype.
    let e = import(&model(28, vec![], vec![], vec![], &[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("opset 28 is not supported"), "{e}");
    // A graph without outputs.
    let e = import(&model(17, vec![], vec![], vec![], &[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("declares no outputs"), "{e}");
    let mut t = f32s("h", &[1], &[]);
    t.data_type = Some(DataType::Float16 as i32);
    t.raw_data = Some(vec![0, 0]);
    let e = import(&model(
        17,
        vec![vi("x", DataType::Float, &[1])],
        vec![t],
        vec![node("Add", "a", &["x", "h"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("FLOAT16"), "{e}");
    // Not protobuf at all.
    let e = import(b"\xff\xff\xff\xff garbage").unwrap_err();
    assert!(matches!(e, OnnxError::Decode { .. }), "{e}");
}

fn err_has(e: &str, parts: &[&str]) -> bool {
    parts.iter().all(|p| e.contains(p))
}

#[test]
fn constant_tensor_and_int32_indices() {
    let idx = TensorProto {
        name: Some("i".into()),
        dims: vec![2],
        data_type: Some(DataType::Int32 as i32),
        int32_data: vec![-1, 0],
        ..Default::default()
    };
    let bytes = model(
        17,
        vec![vi("x", DataType::Float, &[3, 2])],
        vec![],
        vec![
            node("Constant", "c", &[], &["i"], vec![attr_t("value", idx)]),
            node("Gather", "g", &["x", "i"], &["y"], vec![]),
        ],
        &["y"],
    );
    let g = import(&bytes).unwrap();
    dnnc_ir::verify(&g).unwrap();
    let i = g.node(g.value(g.outputs()[0]).producer).inputs[1];
    let data = g.weights.get(&g.value(i).name).unwrap();
    assert_eq!(data.dtype(), DType::I64);
    assert_eq!(
        data.as_i64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![2, 0]
    );
    assert!(matches!(data, Tensor::I64(_)));
}

// ----- the shared real models ------------------------------------------------

fn shared_models() -> Option<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    let dir = if dir.is_dir() {
        dir
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/models")
    };
    if !dir.is_dir() {
        eprintln!("skipping: shared models not found at {}", dir.display());
        return None;
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("model.onnx"))
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    Some(v)
}

#[test]
fn shared_models_import_verify_and_match_meta() {
    let Some(models) = shared_models() else {
        return;
    };
    for path in models {
        let t = std::time::Instant::now();
        let g = dnnc_compiler::onnx::import_onnx_file(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let elapsed = t.elapsed();
        dnnc_ir::verify(&g).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
        g.check_weights_bound().unwrap();
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(path.with_file_name("meta.json")).unwrap(),
        )
        .unwrap();
        let want: Vec<usize> = meta["output_shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(out_shape(&g), want, "{}", path.display());
        let names = ops(&g);
        // Shape chains, Constant nodes and Identity aliases leave no trace.
        for gone in ["Gather", "Unsqueeze", "const", "Identity"] {
            assert!(
                !names.contains(&gone),
                "{}: {gone} left in the IR",
                path.display()
            );
        }
        eprintln!(
            "{}: {} nodes in {elapsed:?}",
            path.display(),
            g.node_count()
        );
    }
}

#[test]
fn shufflenet_shape_chains_fold_away() {
    let Some(models) = shared_models() else {
        return;
    };
    let Some(path) = models.iter().find(|p| {
        p.parent()
            .is_some_and(|d| d.ends_with("shufflenet_v2_x1_0"))
    }) else {
        eprintln!("skipping: no shufflenet model");
        return;
    };
    let g = dnnc_compiler::onnx::import_onnx_file(path).unwrap();
    let names = ops(&g);
    for gone in ["Gather", "Unsqueeze", "const", "Div", "Mul", "Add"] {
        assert!(!names.contains(&gone), "{gone} left");
    }
    // Channel-split Slices keep only the data input; no Mul/Div/Add on i64.
    for n in g.topo_order() {
        let node = g.node(n);
        for &o in &node.outputs {
            assert_ne!(
                g.value(o).ty.dtype,
                DType::I64,
                "{} computes i64 at run time",
                g.value(o).name
            );
        }
    }
    // Concats remain only as the real channel concatenations of f32 data.
    assert_eq!(names.iter().filter(|&&o| o == "Concat").count(), 16);
}

// ----- robustness --------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn check_no_panic(bytes: &[u8], what: &str) {
    if let Err(OnnxError::Internal { message, .. }) = import(bytes) {
        panic!("{what}: importer panicked: {message}");
    }
}

#[test]
fn truncated_and_mutated_models_never_panic() {
    // A small model with every kind of node and a shape chain.
    let bytes = model(
        13,
        vec![vi("x", DataType::Float, &[1, 3, 8, 8])],
        vec![
            f32s("w", &[4, 3, 3, 3], &[0.1; 108]),
            i64s("axes0", &[0]),
            i64s("m1", &[-1]),
        ],
        vec![
            node(
                "Conv",
                "conv",
                &["x", "w"],
                &["c"],
                vec![
                    attr_ints("pads", &[1, 1, 1, 1]),
                    attr_ints("strides", &[1, 1]),
                ],
            ),
            node(
                "MaxPool",
                "pool",
                &["c"],
                &["p"],
                vec![
                    attr_ints("kernel_shape", &[2, 2]),
                    attr_ints("strides", &[2, 2]),
                ],
            ),
            node("Shape", "shape", &["p"], &["s"], vec![]),
            node(
                "Constant",
                "zero",
                &[],
                &["z"],
                vec![attr_i("value_int", 0)],
            ),
            node("Gather", "g", &["s", "z"], &["d0"], vec![]),
            node("Unsqueeze", "u", &["d0", "axes0"], &["d0u"], vec![]),
            node(
                "Concat",
                "cat",
                &["d0u", "m1"],
                &["shape"],
                vec![attr_i("axis", 0)],
            ),
            node("Reshape", "rs", &["p", "shape"], &["y"], vec![]),
        ],
        &["y"],
    );
    import(&bytes).unwrap();
    for cut in 0..bytes.len() {
        check_no_panic(&bytes[..cut], &format!("truncated at {cut}"));
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // ONNX_FUZZ_ROUNDS raises the count for a longer local soak.
    let rounds: usize = std::env::var("ONNX_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    for round in 0..rounds {
        let mut m = bytes.clone();
        for _ in 0..1 + rng.next() % 4 {
            let i = (rng.next() % m.len() as u64) as usize;
            m[i] = match rng.next() % 3 {
                0 => rng.next() as u8,
                1 => m[i].wrapping_add(1),
                _ => m[i] ^ (1 << (rng.next() % 8)),
            };
        }
        check_no_panic(&m, &format!("mutation round {round}"));
    }
}

#[test]
fn truncated_real_model_never_panics() {
    let Some(models) = shared_models() else {
        return;
    };
    let Some(path) = models
        .iter()
        .find(|p| p.parent().is_some_and(|d| d.ends_with("lenet5")))
    else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    let mut rng = Rng(42);
    for _ in 0..200 {
        let cut = (rng.next() % bytes.len() as u64) as usize;
        check_no_panic(&bytes[..cut], &format!("lenet truncated at {cut}"));
    }
    for _ in 0..200 {
        let mut m = bytes.clone();
        // Mutate the structural prefix and the node section, not only weights.
        let span = 4096.min(m.len());
        let i = if rng.next() & 1 == 0 {
            (rng.next() % span as u64) as usize
        } else {
            m.len() - 1 - (rng.next() % span as u64) as usize
        };
        m[i] ^= 1 << (rng.next() % 8);
        check_no_panic(&m, "lenet mutated");
    }
}

#[test]
fn shared_models_match_reference_outputs_on_the_interpreter() {
    let Some(models) = shared_models() else {
        return;
    };
    for path in models {
        let name = path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .to_string();
        // The interpreter is unoptimised in debug builds: check the small
        // model there and all of them in release.
        if cfg!(debug_assertions) && name != "lenet5" {
            continue;
        }
        let g = dnnc_compiler::onnx::import_onnx_file(&path).unwrap();
        let x = dnnc_ir::tensor::read_npy(&path.with_file_name("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&path.with_file_name("output.npy")).unwrap();
        let input = g.value(g.inputs()[0]).name.clone();
        let t = std::time::Instant::now();
        let got = dnnc_runtime::run(&g, &[(input, x)]).unwrap();
        let (got, want) = (got[0].as_f32().unwrap(), want.as_f32().unwrap());
        assert_eq!(got.shape(), want.shape(), "{name}");
        let diff = got
            .iter()
            .zip(want.iter())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!(
            "{name}: max |dnnc - onnxruntime| = {diff:e} ({:?})",
            t.elapsed()
        );
        assert!(diff < 1e-3, "{name}: max abs diff {diff}");
    }
}

fn unsupported_reason(r: Result<Graph, OnnxError>) -> String {
    match r {
        Err(OnnxError::Unsupported(list)) => list
            .iter()
            .map(|u| u.reason.clone())
            .collect::<Vec<_>>()
            .join("; "),
        Err(e) => panic!("expected Unsupported, got {e}"),
        Ok(_) => panic!("expected Unsupported, got a graph"),
    }
}

#[test]
fn versioned_semantics_of_reductions_squeeze_slice_split() {
    let x = || vec![vi("x", DataType::Float, &[2, 3, 4])];
    let one = |opset, inits, n: NodeProto| import(&model(opset, x(), inits, vec![n], &["y"]));
    // ReduceMean: axes attribute before 18, input from 18; ReduceSum input from 13.
    let g = one(
        17,
        vec![],
        node(
            "ReduceMean",
            "r",
            &["x"],
            &["y"],
            vec![attr_ints("axes", &[1]), attr_i("keepdims", 0)],
        ),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 4]);
    let g = one(
        18,
        vec![i64s("ax", &[-1])],
        node("ReduceMax", "r", &["x", "ax"], &["y"], vec![]),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 3, 1]);
    let g = one(
        13,
        vec![i64s("ax", &[0, 2])],
        node("ReduceSum", "r", &["x", "ax"], &["y"], vec![]),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![1, 3, 1]);
    let g = one(
        13,
        vec![],
        node(
            "ReduceSum",
            "r",
            &["x"],
            &["y"],
            vec![attr_i("noop_with_empty_axes", 1)],
        ),
    )
    .unwrap();
    assert_eq!(ops(&g), vec!["input", "Identity"]);
    let g = one(
        13,
        vec![],
        node(
            "ReduceSum",
            "r",
            &["x"],
            &["y"],
            vec![attr_i("keepdims", 0)],
        ),
    )
    .unwrap();
    assert_eq!(out_shape(&g), Vec::<usize>::new());
    // Unsqueeze/Squeeze: attribute before 13, input from 13.
    let g = one(
        11,
        vec![],
        node(
            "Unsqueeze",
            "u",
            &["x"],
            &["y"],
            vec![attr_ints("axes", &[0, 4])],
        ),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![1, 2, 3, 4, 1]);
    let g = one(
        13,
        vec![i64s("ax", &[1])],
        node("Unsqueeze", "u", &["x", "ax"], &["y"], vec![]),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 1, 3, 4]);
    // Slice: attributes before 10 (no steps), inputs with steps from 10.
    let g = one(
        9,
        vec![],
        node(
            "Slice",
            "s",
            &["x"],
            &["y"],
            vec![
                attr_ints("starts", &[1]),
                attr_ints("ends", &[100]),
                attr_ints("axes", &[2]),
            ],
        ),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 3, 3]);
    let g = one(
        13,
        vec![
            i64s("st", &[-1]),
            i64s("en", &[i64::MIN]),
            i64s("ax", &[2]),
            i64s("sp", &[-2]),
        ],
        node("Slice", "s", &["x", "st", "en", "ax", "sp"], &["y"], vec![]),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 3, 2]);
    // Split: attribute before 13, input from 13, equal split by default.
    let g = import(&model(
        11,
        x(),
        vec![],
        vec![node(
            "Split",
            "s",
            &["x"],
            &["y", "z"],
            vec![attr_i("axis", 2), attr_ints("split", &[1, 3])],
        )],
        &["y", "z"],
    ))
    .unwrap();
    assert_eq!(g.value(g.outputs()[1]).ty.shape, vec![2, 3, 3]);
    let g = import(&model(
        13,
        x(),
        vec![],
        vec![node(
            "Split",
            "s",
            &["x"],
            &["y", "z"],
            vec![attr_i("axis", -1)],
        )],
        &["y", "z"],
    ))
    .unwrap();
    assert_eq!(g.value(g.outputs()[0]).ty.shape, vec![2, 3, 2]);
    let e = import(&model(
        13,
        x(),
        vec![],
        vec![node(
            "Split",
            "s",
            &["x"],
            &["y", "z"],
            vec![attr_i("axis", 1)],
        )],
        &["y", "z"],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("does not split evenly"), "{e}");
    // Pad: attributes before 11.
    let g = one(
        7,
        vec![],
        node(
            "Pad",
            "p",
            &["x"],
            &["y"],
            vec![attr_ints("pads", &[0, 1, 0, 0, 1, 0]), attr_f("value", 1.5)],
        ),
    )
    .unwrap();
    assert_eq!(out_shape(&g), vec![2, 5, 4]);
    // Transpose defaults to reversing the axes.
    let g = one(13, vec![], node("Transpose", "t", &["x"], &["y"], vec![])).unwrap();
    assert_eq!(out_shape(&g), vec![4, 3, 2]);
}

#[test]
fn inference_only_ops_and_opset_gated_ops() {
    let x = || vec![vi("x", DataType::Float, &[1, 2, 3, 3])];
    let bn_inits = || {
        vec![
            f32s("s", &[2], &[1.0; 2]),
            f32s("b", &[2], &[0.0; 2]),
            f32s("m", &[2], &[0.0; 2]),
            f32s("v", &[2], &[1.0; 2]),
        ]
    };
    let bn = |attrs, outs: &[&str]| {
        node(
            "BatchNormalization",
            "bn",
            &["x", "s", "b", "m", "v"],
            outs,
            attrs,
        )
    };
    let g = import(&model(
        15,
        x(),
        bn_inits(),
        vec![bn(vec![attr_f("epsilon", 1e-3)], &["y"])],
        &["y"],
    ))
    .unwrap();
    assert!(
        matches!(g.node(g.value(g.outputs()[0]).producer).op, Op::BatchNormalization { epsilon } if epsilon == 1e-3)
    );
    let r = unsupported_reason(import(&model(
        15,
        x(),
        bn_inits(),
        vec![bn(vec![attr_i("training_mode", 1)], &["y"])],
        &["y"],
    )));
    assert!(r.contains("training_mode=1"), "{r}");
    let r = unsupported_reason(import(&model(
        15,
        x(),
        bn_inits(),
        vec![bn(vec![], &["y", "rm", "rv"])],
        &["y"],
    )));
    assert!(r.contains("eval()"), "{r}");
    // Dropout: pass-through; a used mask is all true.
    let g = import(&model(
        13,
        x(),
        vec![],
        vec![node("Dropout", "d", &["x"], &["y", "mask"], vec![])],
        &["y"],
    ))
    .unwrap();
    assert_eq!(ops(&g), vec!["input", "Dropout"]);
    let g = import(&model(
        13,
        x(),
        vec![],
        vec![node("Dropout", "d", &["x"], &["y", "mask"], vec![])],
        &["y", "mask"],
    ))
    .unwrap();
    let mask = g.weights.get("mask").expect("mask is a constant");
    assert!(mask.as_bool().expect("bool mask").iter().all(|&b| b));
    // Gelu exists from opset 20; HardSwish from 14.
    let gelu = |opset| {
        import(&model(
            opset,
            x(),
            vec![],
            vec![node(
                "Gelu",
                "g",
                &["x"],
                &["y"],
                vec![attr_s("approximate", "tanh")],
            )],
            &["y"],
        ))
    };
    assert!(unsupported_reason(gelu(17)).contains("opset 20"));
    let g = gelu(20).unwrap();
    assert!(matches!(
        g.node(g.value(g.outputs()[0]).producer).op,
        Op::Unary(dnnc_ir::op::Unary::Gelu { tanh_approx: true })
    ));
    // Reshape allowzero=1 with a zero is unsupported.
    let r = unsupported_reason(import(&model(
        14,
        x(),
        vec![i64s("sh", &[0, -1])],
        vec![node(
            "Reshape",
            "r",
            &["x", "sh"],
            &["y"],
            vec![attr_i("allowzero", 1)],
        )],
        &["y"],
    )));
    assert!(r.contains("allowzero=1"), "{r}");
    // AveragePool with SAME_LOWER, ceil mode and count_include_pad.
    let g = import(&model(
        17,
        x(),
        vec![],
        vec![node(
            "AveragePool",
            "ap",
            &["x"],
            &["y"],
            vec![
                attr_ints("kernel_shape", &[2, 2]),
                attr_s("auto_pad", "SAME_LOWER"),
                attr_i("count_include_pad", 1),
                attr_i("ceil_mode", 1),
            ],
        )],
        &["y"],
    ))
    .unwrap();
    let Op::AveragePool(p) = &g.node(g.value(g.outputs()[0]).producer).op else {
        panic!()
    };
    assert_eq!(
        (p.pads, p.count_include_pad, p.ceil_mode),
        ([1, 1, 0, 0], true, true)
    );
    assert_eq!(out_shape(&g), vec![1, 2, 3, 3]);
}

#[test]
fn dtypes_casts_and_shape_helpers_fold() {
    let x = || vec![vi("x", DataType::Float, &[2, 3])];
    // A DOUBLE initializer works as a Clip bound but not as an operand.
    let dbl = |name: &str, v: f64| TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Double as i32),
        double_data: vec![v],
        ..Default::default()
    };
    let g = import(&model(
        13,
        x(),
        vec![dbl("lo", -1.0)],
        vec![node("Clip", "c", &["x", "lo"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap();
    assert!(
        matches!(g.node(g.value(g.outputs()[0]).producer).op, Op::Unary(dnnc_ir::op::Unary::Clip { min, .. }) if min == -1.0)
    );
    let r = unsupported_reason(import(&model(
        13,
        x(),
        vec![dbl("d", 2.0)],
        vec![node("Add", "a", &["x", "d"], &["y"], vec![])],
        &["y"],
    )));
    assert!(r.contains("DOUBLE"), "{r}");
    // Pow with an int64 exponent constant.
    let g = import(&model(
        13,
        x(),
        vec![i64s("two", &[2])],
        vec![node("Pow", "p", &["x", "two"], &["y"], vec![])],
        &["y"],
    ))
    .unwrap();
    dnnc_ir::verify(&g).unwrap();
    // Cast of a run-time tensor to another dtype is an IR Cast; to the same one is a no-op.
    let g = import(&model(
        13,
        x(),
        vec![],
        vec![node(
            "Cast",
            "c",
            &["x"],
            &["y"],
            vec![attr_i("to", DataType::Int64 as i64)],
        )],
        &["y"],
    ))
    .unwrap();
    assert_eq!(ops(&g), vec!["input", "Cast"]);
    // Expand with a shape computed by ConstantOfShape/Range/Equal/Where/Cast.
    let ones = TensorProto {
        dims: vec![1],
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![1],
        ..Default::default()
    };
    let scalar = |name: &str, v: i64| TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Int64 as i32),
        int64_data: vec![v],
        ..Default::default()
    };
    let g = import(&model(
        13,
        x(),
        vec![
            i64s("len", &[3]),
            scalar("zero", 0),
            scalar("three", 3),
            scalar("one", 1),
            i64s("target", &[4, 2, 3]),
        ],
        vec![
            node(
                "ConstantOfShape",
                "cos",
                &["len"],
                &["ones"],
                vec![attr_t("value", ones)],
            ),
            node(
                "Range",
                "range",
                &["zero", "three", "one"],
                &["idx"],
                vec![],
            ),
            node("Equal", "eq", &["idx", "zero"], &["first"], vec![]),
            node(
                "Where",
                "w",
                &["first", "target", "ones"],
                &["shape"],
                vec![],
            ),
            node(
                "Cast",
                "cast",
                &["shape"],
                &["shape64"],
                vec![attr_i("to", DataType::Int64 as i64)],
            ),
            node("Size", "size", &["x"], &["n"], vec![]),
            node("Expand", "e", &["x", "shape64"], &["y"], vec![]),
        ],
        &["y", "n"],
    ))
    .unwrap();
    dnnc_ir::verify(&g).unwrap();
    assert_eq!(out_shape(&g), vec![4, 2, 3]);
    // The folded Size output is a graph output, so it is a const.
    let n = g.weights.get("n").unwrap();
    assert_eq!(
        n.as_i64().unwrap().iter().copied().collect::<Vec<_>>(),
        vec![6]
    );
    assert_eq!(ops(&g).iter().filter(|&&o| o == "const").count(), 1);
}

#[test]
fn imported_shufflenet_prints_and_reparses() {
    let Some(models) = shared_models() else {
        return;
    };
    let Some(path) = models.iter().find(|p| {
        p.parent()
            .is_some_and(|d| d.ends_with("shufflenet_v2_x1_0"))
    }) else {
        return;
    };
    let g = dnnc_compiler::onnx::import_onnx_file(path).unwrap();
    let text = dnnc_ir::text::print(&g);
    let back = dnnc_ir::text::parse(&text, "shufflenet.dnn").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.node_count(), g.node_count());
    assert_eq!(dnnc_ir::text::print(&back), text);
    let line = text.lines().find(|l| l.contains("Reshape")).unwrap();
    eprintln!("{line}");
}

/// `Mod` folds at import (torchvision's ViT computes attention shapes
/// with it): integer mod takes the divisor's sign by default, the
/// dividend's with `fmod=1`; the folded values reach a graph output.
/// A Mod of a runtime value, a zero integer divisor, a float Mod
/// without `fmod=1` and a bad `fmod` are clear errors naming the node.
#[test]
fn mod_of_constants_folds_and_bad_mods_are_clear_errors() {
    let x = || vec![vi("x", DataType::Float, &[2, 3])];
    let folded = |fmod: i64| {
        let g = import(&model(
            13,
            x(),
            vec![i64s("a", &[7, -7, 7, -7, 6]), i64s("b", &[3, 3, -3, -3, 3])],
            vec![
                node("Mod", "m", &["a", "b"], &["r"], vec![attr_i("fmod", fmod)]),
                node("Relu", "relu", &["x"], &["y"], vec![]),
            ],
            &["y", "r"],
        ))
        .unwrap();
        dnnc_ir::verify(&g).unwrap();
        let r = g.weights.get("r").unwrap();
        r.as_i64().unwrap().iter().copied().collect::<Vec<i64>>()
    };
    assert_eq!(folded(0), vec![1, 2, -2, -1, 0]);
    assert_eq!(folded(1), vec![1, -1, 1, -1, 0]);
    // A float Mod of Constant nodes (f32 initializers are parameters,
    // which `--weights` may override) with fmod=1 folds as C's fmod,
    // broadcasting the divisor.
    let constant = |name: &str, v: &[f32]| {
        let t = f32s("", &[v.len() as i64], v);
        node("Constant", name, &[], &[name], vec![attr_t("value", t)])
    };
    let g = import(&model(
        13,
        x(),
        vec![],
        vec![
            constant("p", &[5.5, -5.5, 2.0]),
            constant("q", &[2.0]),
            node("Mod", "m", &["p", "q"], &["r"], vec![attr_i("fmod", 1)]),
            node("Relu", "relu", &["x"], &["y"], vec![]),
        ],
        &["y", "r"],
    ))
    .unwrap();
    let r = g.weights.get("r").unwrap();
    assert_eq!(
        r.as_f32().unwrap().iter().copied().collect::<Vec<f32>>(),
        vec![1.5, -1.5, 0.0]
    );
    let r = unsupported_reason(import(&model(
        13,
        x(),
        vec![f32s("two", &[1], &[2.0])],
        vec![node(
            "Mod",
            "runtime_mod",
            &["x", "two"],
            &["y"],
            vec![attr_i("fmod", 1)],
        )],
        &["y"],
    )));
    assert!(r.contains("Mod of runtime values"), "{r}");
    for (inits, fmod, want) in [
        (vec![i64s("a", &[4]), i64s("b", &[0])], 0, "by zero"),
        (
            vec![f32s("a", &[1], &[4.0]), f32s("b", &[1], &[3.0])],
            0,
            "runtime values",
        ),
        (
            vec![i64s("a", &[4]), i64s("b", &[3])],
            2,
            "fmod must be 0 or 1",
        ),
    ] {
        let e = import(&model(
            13,
            x(),
            inits,
            vec![
                node(
                    "Mod",
                    "bad_mod",
                    &["a", "b"],
                    &["r"],
                    vec![attr_i("fmod", fmod)],
                ),
                node("Relu", "relu", &["x"], &["y"], vec![]),
            ],
            &["y", "r"],
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("bad_mod") && e.contains(want), "{e}");
    }
    let e = import(&model(
        13,
        x(),
        vec![],
        vec![
            constant("p", &[4.0]),
            constant("q", &[3.0]),
            node("Mod", "float_mod", &["p", "q"], &["r"], vec![]),
            node("Relu", "relu", &["x"], &["y"], vec![]),
        ],
        &["y", "r"],
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("float_mod") && e.contains("fmod=1"), "{e}");
}
