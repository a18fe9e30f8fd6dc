//! Every model under `../shared/models/*/` (discovered, not listed): the
//! ONNX import runs `input.npy` on the interpreter and must match
//! onnxruntime's `output.npy` (rtol 1e-3, atol 1e-4); `dnnc analyze` works
//! on each; ResNet-18's contraction work is the known figure.

use clap::Parser;
use dnnc_integration::{allclose, zoo_models};
use dnnc_ir::tensor::read_npy;
use std::path::PathBuf;

/// Model folders with `model.onnx`, sorted by name (none, with a skip
/// message, where there are none).
fn zoo(test: &str) -> Vec<PathBuf> {
    let dirs = zoo_models(test);
    if dirs.as_ref().is_some_and(Vec::is_empty) {
        eprintln!("SKIPPED {test}: no models under shared/models");
    }
    dirs.unwrap_or_default()
}

fn name(dir: &std::path::Path) -> String {
    dir.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn zoo_models_analyze() {
    for dir in zoo("zoo_models_analyze") {
        let model = dir.join("model.onnx");
        let cli = dnnc_compiler::cli::Cli::try_parse_from([
            "dnnc".to_string(),
            "analyze".into(),
            model.display().to_string(),
            "--procs".into(),
            "2".into(),
        ])
        .expect("arguments parse");
        let table = dnnc_compiler::cli::execute(cli, &mut |_| {})
            .unwrap_or_else(|e| panic!("dnnc analyze {}: {e}", model.display()));
        assert!(!table.is_empty());
        let g = dnnc_compiler::load_model(&model).expect("imports");
        let work = dnnc_passes::wd::analyze(&g).contraction_work();
        eprintln!("{:<20} contraction work {work}", name(&dir));
        if name(&dir) == "resnet18" {
            assert_eq!(work, 1_814_073_344, "ResNet-18 conv + FC multiply-adds");
        }
    }
}

/// Slow in debug builds (full ImageNet-size networks on the interpreter);
/// `.ci/run` runs it with `--include-ignored` in release.
#[test]
#[ignore = "runs six ImageNet-size networks; use cargo test --release -- --include-ignored"]
fn zoo_models_match_onnxruntime() {
    let mut report = vec![];
    let mut bad = vec![];
    for dir in zoo("zoo_models_match_onnxruntime") {
        let g = dnnc_compiler::load_model(&dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{}: import failed: {e}", dir.display()));
        let input = read_npy(&dir.join("input.npy")).expect("input.npy");
        let want = read_npy(&dir.join("output.npy")).expect("output.npy");
        assert_eq!(g.inputs().len(), 1, "{}: one graph input", dir.display());
        let in_name = g.value(g.inputs()[0]).name.clone();
        let t0 = std::time::Instant::now();
        let outs = dnnc_runtime::run(&g, &[(in_name, input)])
            .unwrap_or_else(|e| panic!("{}: run failed: {e}", dir.display()));
        let secs = t0.elapsed().as_secs_f64();
        let (got, want) = (
            outs[0].as_f32().expect("f32 output"),
            want.as_f32().expect("f32 reference"),
        );
        assert_eq!(got.shape(), want.shape(), "{}", dir.display());
        let (ok, max_abs, max_rel) = allclose(
            got.as_slice().expect("contiguous"),
            want.as_slice().expect("contiguous"),
            1e-3,
            1e-4,
        );
        let line = format!(
            "{:<20} max abs err {max_abs:.3e}  max rel err {max_rel:.3e}  {secs:.2}s  {}",
            name(&dir),
            if ok { "ok" } else { "MISMATCH" }
        );
        eprintln!("{line}");
        report.push(line);
        if !ok {
            bad.push(name(&dir));
        }
    }
    assert!(
        bad.is_empty(),
        "outputs differ from onnxruntime beyond rtol 1e-3, atol 1e-4: {bad:?}\n{}",
        report.join("\n")
    );
}
