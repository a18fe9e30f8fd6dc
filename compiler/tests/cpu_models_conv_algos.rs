//! Every real model in `../shared/models` on the CPU backend with each
//! convolution algorithm forced (where it does not apply, the default is
//! used, as `conv_plan` reports): the output must match onnxruntime's
//! `output.npy` within rtol 1e-3, atol 1e-4 — for Winograd F(4x4) too
//! (measured max errors in docs/cpu-backend.md, "Convolution algorithms").
//! Release-mode test, ignored in debug builds like `cpu_models.rs`.

mod cpu_common;

use clap::ValueEnum;
use dnnc_compiler::codegen::cpu::{compile_cpu, conv_plan, ConvAlgo, CpuOptions};

#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_match_onnxruntime_with_every_conv_algorithm() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        for &a in ConvAlgo::value_variants() {
            let opts = CpuOptions {
                conv_algo: Some(a),
                ..Default::default()
            };
            let used = conv_plan(&g, &opts).iter().filter(|c| c.algo == a).count();
            let exe = compile_cpu(&g, &opts).unwrap_or_else(|e| panic!("{name} {a:?}: {e}"));
            let got = exe
                .run(&ins)
                .unwrap_or_else(|e| panic!("{name} {a:?}: {e}"));
            let err =
                cpu_common::assert_close(&format!("{name} {a:?}"), &got[0], &want, 1e-3, 1e-4);
            println!(
                "{name:20} {:10} on {used:2} convs: max abs err {err:.2e}",
                a.name()
            );
        }
    }
}
