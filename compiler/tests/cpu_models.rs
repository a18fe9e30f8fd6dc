//! Every real model in `../shared/models` on the CPU backend: the compiled
//! executable must match onnxruntime's `output.npy` within rtol 1e-3,
//! atol 1e-4. Release-mode test (ignored in debug builds for speed; CI
//! runs ignored tests in release). Prints the max abs error and latency of
//! each model, with the interpreter's latency for comparison.

mod cpu_common;

use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use std::time::Instant;

#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_match_onnxruntime_on_cpu_backend() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
        let t = Instant::now();
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let compile = t.elapsed();
        let input_name = g.value(g.inputs()[0]).name.clone();
        let ins = vec![(input_name, x)];
        let got = exe.run(&ins).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Warm timing: best of 3.
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t = Instant::now();
            exe.run(&ins).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        dnnc_runtime::run(&g, &ins).unwrap();
        let interp = t.elapsed().as_secs_f64();
        let err = cpu_common::assert_close(&name, &got[0], &want, 1e-3, 1e-4);
        println!(
            "{name}: max abs err {err:.2e}, {} kernels, compile {:.0} ms, cpu {:.1} ms, interpreter {:.1} ms",
            exe.num_steps(),
            compile.as_secs_f64() * 1e3,
            best * 1e3,
            interp * 1e3
        );
    }
}

/// The same after the optimisation pipeline (`--optimize`: simplify,
/// fold-batchnorm, egraph, fold-weights, split-order, select-conv-algo): every model
/// still matches
/// onnxruntime's output.
#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_match_onnxruntime_after_the_pipeline() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let mut g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut p = dnnc_passes::Pipeline::default();
        p.verify = true;
        p.run(&mut g).unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        let got = exe.run(&ins).unwrap_or_else(|e| panic!("{name}: {e}"));
        let err = cpu_common::assert_close(&name, &got[0], &want, 1e-3, 1e-4);
        println!("{name} after the pipeline: max abs err {err:.2e}");
    }
}

/// No kernel of a zoo model reads arena memory that nothing wrote in
/// the run (the runtime's invariant: kernels write every temp before
/// reading it, so a reused arena's stale contents are harmless): run on
/// an arena whose every float is a NaN (`Executable::set_arena_fill`),
/// one thread and two, each model gives the bits it gives on a zeroed
/// arena.
#[test]
#[ignore = "release-mode numeric test on real models (CI runs it with --include-ignored)"]
fn zoo_models_read_no_memory_they_did_not_write() {
    let Some(models) = cpu_common::shared_models() else {
        return;
    };
    let bits = |t: &[dnnc_ir::Tensor]| match &t[0] {
        dnnc_ir::Tensor::F32(a) => a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        other => panic!("expected f32 output, found {:?}", other.ty()),
    };
    for dir in models {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        let mut exe =
            compile_cpu(&g, &CpuOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let clean = bits(&exe.run(&ins).unwrap());
        for threads in [1, 2] {
            exe.set_threads(threads).unwrap();
            // (Also drops the run state the last run left.)
            exe.set_arena_fill(Some(0xFF));
            assert!(
                clean == bits(&exe.run(&ins).unwrap()),
                "{name}: on an arena of NaNs at {threads} threads the output differs"
            );
        }
        println!("{name}: the same bits on an arena of NaNs");
    }
}
