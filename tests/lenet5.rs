//! LeNet-5 from the bundled text model, bound to the real PyTorch weights,
//! must reproduce onnxruntime's output (`../shared/models/lenet5`).

use dnnc_integration::{allclose, example, shared_or_skip};
use dnnc_ir::tensor::read_npy;

#[test]
fn lenet5_text_model_matches_onnxruntime() {
    let Some(shared) = shared_or_skip("lenet5_text_model_matches_onnxruntime") else {
        return;
    };
    let dir = shared.join("models").join("lenet5");
    let out_dir = std::env::temp_dir().join(format!("dnnc-lenet5-{}", std::process::id()));
    let model = example("lenet5.dnn");
    let args = [
        "dnnc".to_string(),
        "run".into(),
        model.display().to_string(),
        "--weights".into(),
        dir.join("weights.safetensors").display().to_string(),
        "--input".into(),
        dir.join("input.npy").display().to_string(),
        "--out".into(),
        out_dir.display().to_string(),
    ];
    use clap::Parser;
    let cli = dnnc_compiler::cli::Cli::try_parse_from(args).expect("arguments parse");
    let mut notes = vec![];
    let text = dnnc_compiler::cli::execute(cli, &mut |s| notes.push(s.to_string()))
        .unwrap_or_else(|e| panic!("dnnc run failed: {e}"));
    assert!(text.contains("%output: f32[1,10]"), "{text}");
    assert!(
        notes.is_empty(),
        "every safetensors tensor should bind: {notes:?}"
    );

    let got = read_npy(&out_dir.join("output.npy")).expect("output written");
    let want = read_npy(&dir.join("output.npy")).expect("reference output");
    let (got, want) = (got.as_f32().expect("f32"), want.as_f32().expect("f32"));
    assert_eq!(got.shape(), want.shape());
    let (ok, max_abs, max_rel) = allclose(
        got.as_slice().expect("contiguous"),
        want.as_slice().expect("contiguous"),
        1e-4,
        1e-5,
    );
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(ok, "max abs {max_abs:e}, max rel {max_rel:e}");
    eprintln!("lenet5: max abs error {max_abs:e}, max rel error {max_rel:e}");
}

#[test]
fn lenet5_without_weights_runs_on_seeded_initializers() {
    let g = dnnc_compiler::load_model(&example("lenet5.dnn")).expect("loads");
    let x = dnnc_ir::Tensor::F32(ndarray::ArrayD::from_elem(vec![1, 1, 32, 32], 0.25));
    let a = dnnc_runtime::run(&g, &[("input".into(), x.clone())]).expect("runs");
    let b = dnnc_runtime::run(&g, &[("input".into(), x)]).expect("runs");
    assert_eq!(a, b, "seeded initializers are deterministic");
    assert_eq!(a[0].shape(), &[1, 10]);
}
