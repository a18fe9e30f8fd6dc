//! Every failure is a `RunError` naming the culprit, never a panic.

mod common;
use common::*;
use dnnc_ir::op::Binary;
use dnnc_ir::{Graph, Init, Op, TensorType};
use dnnc_runtime::{run, RunError};

fn two_input_graph() -> Graph {
    let mut g = Graph::new("g");
    let x = g.add_input("x", TensorType::f32(vec![2, 3])).unwrap();
    let y = g.add_input("y", TensorType::f32(vec![3])).unwrap();
    let s = g.add(Op::Binary(Binary::Add), &[x, y], "s").unwrap();
    g.set_outputs(vec![s]);
    g
}

#[test]
fn missing_input() {
    let g = two_input_graph();
    let e = run(&g, &[("x".into(), iota(&[2, 3], 0.))]).unwrap_err();
    assert!(
        matches!(e, RunError::MissingInput { ref name, .. } if name == "y"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "missing graph input `y` (expected f32[3])");
}

#[test]
fn unknown_and_duplicate_inputs() {
    let g = two_input_graph();
    let feeds = [
        ("x".to_string(), iota(&[2, 3], 0.)),
        ("y".to_string(), iota(&[3], 0.)),
        ("z".to_string(), iota(&[3], 0.)),
    ];
    let e = run(&g, &feeds).unwrap_err();
    assert!(
        matches!(e, RunError::UnknownInput { ref name, .. } if name == "z"),
        "{e:?}"
    );
    assert!(e.to_string().contains("x, y"), "{e}");
    // `s` is a value of the graph but not an input.
    let e = run(&g, &[("s".to_string(), iota(&[2, 3], 0.))]).unwrap_err();
    assert!(matches!(e, RunError::UnknownInput { .. }), "{e:?}");
    let feeds = [
        ("x".to_string(), iota(&[2, 3], 0.)),
        ("x".to_string(), iota(&[2, 3], 0.)),
    ];
    let e = run(&g, &feeds).unwrap_err();
    assert!(
        matches!(e, RunError::DuplicateInput { ref name } if name == "x"),
        "{e:?}"
    );
}

#[test]
fn wrong_shape_or_dtype() {
    let g = two_input_graph();
    let e = run(
        &g,
        &[
            ("x".into(), iota(&[3, 2], 0.)),
            ("y".into(), iota(&[3], 0.)),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "graph input `x` expects f32[2,3], but the tensor given is f32[3,2]"
    );
    let e = run(
        &g,
        &[
            ("x".into(), iota(&[2, 3], 0.)),
            ("y".into(), i(&[3], &[1, 2, 3])),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "graph input `y` expects f32[3], but the tensor given is i64[3]"
    );
}

#[test]
fn gather_index_out_of_range_names_node() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", TensorType::f32(vec![3, 2])).unwrap();
    let idx = g
        .add_input("idx", TensorType::new(dnnc_ir::DType::I64, vec![2]))
        .unwrap();
    let y = g.add(Op::Gather { axis: 0 }, &[x, idx], "emb").unwrap();
    g.set_outputs(vec![y]);
    for bad in [3, -4] {
        let e = run(
            &g,
            &[
                ("x".into(), iota(&[3, 2], 0.)),
                ("idx".into(), i(&[2], &[0, bad])),
            ],
        )
        .unwrap_err();
        assert!(
            matches!(e, RunError::Op { ref node, ref op, .. } if node == "emb" && op == "Gather"),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("index {bad} is out of range")),
            "{msg}"
        );
    }
}

#[test]
fn integer_division_by_zero() {
    let e = try_eval(
        Op::Binary(Binary::Div),
        &[i(&[2], &[1, 2]), i(&[2], &[1, 0])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("division by zero"), "{e}");
}

#[test]
fn missing_external_weight_names_parameter() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", TensorType::f32(vec![1, 2])).unwrap();
    let w = g
        .add_param(
            "fc_w",
            TensorType::f32(vec![2, 2]),
            Init::External("fc.weight".into()),
        )
        .unwrap();
    let y = g.add(Op::MatMul, &[x, w], "y").unwrap();
    g.set_outputs(vec![y]);
    let e = run(&g, &[("x".into(), iota(&[1, 2], 0.))]).unwrap_err();
    assert!(
        matches!(e, RunError::Weight { ref name, .. } if name == "fc_w"),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("fc_w") && msg.contains("fc.weight"), "{msg}");
    // Once bound it runs: [0,1] @ [[1,2],[3,4]] = [3,4].
    g.bind_weights([("fc.weight".to_string(), iota(&[2, 2], 1.))])
        .unwrap();
    let out = run(&g, &[("x".into(), iota(&[1, 2], 0.))]).unwrap();
    assert_f32(&out[0], &[1, 2], &[3., 4.]);
}

#[test]
fn weight_data_of_wrong_type_is_reported() {
    // The weight store is public; data that no longer fits its value is an
    // error, not a silent wrong answer.
    let mut g = Graph::new("g");
    let x = g.add_input("x", TensorType::f32(vec![2])).unwrap();
    let c = g.add_constant("c", iota(&[2], 0.)).unwrap();
    let y = g.add(Op::Binary(Binary::Add), &[x, c], "y").unwrap();
    g.set_outputs(vec![y]);
    g.weights.insert("c", iota(&[3], 0.));
    let e = run(&g, &[("x".into(), iota(&[2], 0.))]).unwrap_err();
    assert!(
        matches!(e, RunError::WeightType { ref name, .. } if name == "c"),
        "{e:?}"
    );
}

#[test]
fn outputs_may_repeat_and_be_inputs() {
    let mut g = Graph::new("g");
    let x = g.add_input("x", TensorType::f32(vec![2])).unwrap();
    let r = g
        .add(Op::Unary(dnnc_ir::op::Unary::Neg), &[x], "r")
        .unwrap();
    g.set_outputs(vec![r, x, r]);
    let out = run(&g, &[("x".into(), f(&[2], &[1., -2.]))]).unwrap();
    assert_f32(&out[0], &[2], &[-1., 2.]);
    assert_f32(&out[1], &[2], &[1., -2.]);
    assert_f32(&out[2], &[2], &[-1., 2.]);
}
