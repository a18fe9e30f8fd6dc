//! The GPU backend on whole models: every shader generated for every zoo
//! model (and every bundled example) passes naga's validation, without a
//! device; LeNet-5, SqueezeNet and three batch-8 blocks (EfficientNet,
//! Inception-v3, ResNet-50) run on the default adapter and match
//! onnxruntime's `output.npy` (rtol 1e-3, atol 1e-4), as the pipeline's
//! optimised graphs do too.

use dnnc_integration::{allclose, examples, gpu_or_skip, shared_or_skip, zoo_models};
use dnnc_ir::tensor::read_npy;
use std::path::PathBuf;

/// The zoo's model folders; there must be some where the reference
/// material is present.
fn zoo(test: &str) -> Vec<PathBuf> {
    let dirs = zoo_models(test);
    if let Some(d) = &dirs {
        assert!(!d.is_empty(), "{test}: no models under shared/models");
    }
    dirs.unwrap_or_default()
}

#[test]
fn every_zoo_and_example_shader_passes_naga_validation() {
    let mut models: Vec<PathBuf> = zoo("every_zoo_shader_validates")
        .into_iter()
        .map(|d| d.join("model.onnx"))
        .collect();
    models.extend(examples());
    let opts = dnnc_compiler::codegen::gpu::GpuOptions::default();
    for m in &models {
        for optimise in [false, true] {
            let mut g = dnnc_compiler::load_model(m).expect("loads");
            if optimise {
                dnnc_passes::Pipeline::default()
                    .run(&mut g)
                    .expect("pipeline");
            }
            let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts)
                .unwrap_or_else(|e| panic!("{} (optimised: {optimise}): {e}", m.display()));
            eprintln!(
                "{:<60} optimised {optimise:<5} {:>3} kernels {:>3} shaders valid",
                m.display(),
                p.kernels.len(),
                p.stages().count()
            );
        }
    }
}

fn run_zoo_model(test: &str, name: &str, optimise: bool) {
    let Some(shared) = shared_or_skip(test) else {
        return;
    };
    run_model_dir(test, &shared.join("models").join(name), optimise);
}

/// Runs `dir/model.onnx` on `dir/input.npy` on the default adapter (after
/// the whole pipeline with `optimise`, else the baseline passes `dnnc run`
/// applies) and compares with `dir/output.npy`.
fn run_model_dir(test: &str, dir: &std::path::Path, optimise: bool) {
    let Some(dev) = gpu_or_skip(test) else {
        return;
    };
    let name = dir
        .file_name()
        .expect("a folder")
        .to_string_lossy()
        .to_string();
    let mut g = dnnc_compiler::load_model(&dir.join("model.onnx")).expect("imports");
    let pipeline = if optimise {
        dnnc_passes::Pipeline::default()
    } else {
        dnnc_passes::Pipeline::baseline()
    };
    pipeline.run(&mut g).expect("pipeline");
    let x = read_npy(&dir.join("input.npy")).expect("input.npy");
    let want = read_npy(&dir.join("output.npy")).expect("output.npy");
    let input = g.value(g.inputs()[0]).name.clone();
    let opts = dnnc_compiler::codegen::gpu::GpuOptions {
        limits: dev.limits(),
        ..Default::default()
    };
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &opts).unwrap_or_else(|e| panic!("{e}"));
    let exe = dnnc_runtime::gpu::GpuExecutable::new(dev, p).unwrap_or_else(|e| panic!("{e}"));
    let got = exe.run(&[(input, x)]).unwrap_or_else(|e| panic!("{e}"));
    let a: Vec<f32> = got[0].as_f32().expect("f32").iter().copied().collect();
    let e: Vec<f32> = want.as_f32().expect("f32").iter().copied().collect();
    let (ok, abs, rel) = allclose(&a, &e, 1e-3, 1e-4);
    eprintln!("{name} on the GPU (optimised: {optimise}): max abs {abs:e}, max rel {rel:e}");
    assert!(
        ok,
        "{name}: GPU output differs from onnxruntime: max abs {abs:e}"
    );
}

#[test]
fn lenet5_on_the_gpu_matches_onnxruntime() {
    run_zoo_model("lenet5_gpu", "lenet5", false);
    run_zoo_model("lenet5_gpu", "lenet5", true);
}

/// Batch-8 blocks of the architectures beyond the zoo: EfficientNet's
/// (SiLU diamonds fused into conv kernels, a squeeze-excitation gate),
/// Inception-v3's (1x7/7x1 convs, average pooling) and ResNet-50's.
#[test]
fn batch8_blocks_on_the_gpu_match_onnxruntime() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/blocks");
    for name in [
        "effnet_block_b8",
        "inception3_block_b8",
        "resnet50_block_b8",
    ] {
        run_model_dir("batch8_blocks_gpu", &root.join(name), false);
    }
}

#[test]
fn squeezenet_on_the_gpu_matches_onnxruntime() {
    run_zoo_model("squeezenet_gpu", "squeezenet1_1", true);
}

/// The command a user types: `dnnc run model.onnx --backend gpu --input
/// input.npy --out DIR` writes onnxruntime's output (LeNet-5, SqueezeNet).
#[test]
fn dnnc_run_backend_gpu_reproduces_onnxruntime() {
    use clap::Parser;
    let test = "dnnc_run_backend_gpu_reproduces_onnxruntime";
    let Some(shared) = shared_or_skip(test) else {
        return;
    };
    if gpu_or_skip(test).is_none() {
        return;
    }
    for name in ["lenet5", "squeezenet1_1"] {
        let dir = shared.join("models").join(name);
        let out = std::env::temp_dir().join(format!("dnnc-gpu-run-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let cli = dnnc_compiler::cli::Cli::try_parse_from([
            "dnnc".to_string(),
            "run".into(),
            dir.join("model.onnx").display().to_string(),
            "--backend".into(),
            "gpu".into(),
            "--input".into(),
            dir.join("input.npy").display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ])
        .expect("arguments parse");
        dnnc_compiler::cli::execute(cli, &mut |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
        let file = std::fs::read_dir(&out)
            .expect("output dir")
            .next()
            .expect("one output file")
            .expect("entry")
            .path();
        let got = read_npy(&file).expect("written .npy");
        let want = read_npy(&dir.join("output.npy")).expect("output.npy");
        let a: Vec<f32> = got.as_f32().expect("f32").iter().copied().collect();
        let e: Vec<f32> = want.as_f32().expect("f32").iter().copied().collect();
        let (ok, abs, _) = allclose(&a, &e, 1e-3, 1e-4);
        assert!(
            ok,
            "{name}: dnnc run --backend gpu differs from onnxruntime: max abs {abs:e}"
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

/// `bench/gpu_bench.sh`'s largest case, ResNet-50 at batch 32 (the
/// example with its input batch rewritten, as the script does), compiles
/// to validated shaders within every grid limit; on an adapter whose
/// storage bindings cannot hold its arena (lavapipe: 128 MiB) building
/// the executable is a clear limit error, not a crash.
#[test]
fn resnet50_batch32_compiles_for_the_gpu() {
    let src = std::fs::read_to_string(dnnc_integration::example("resnet50.dnn")).expect("example");
    // The script's rewrite: every batch-1 type annotation to batch 32.
    let batched = src.replace("f32[1,", "f32[32,");
    assert!(batched.contains("input %input: f32[32,3,224,224]"));
    let g = dnnc_compiler::load_model_str(&batched, "resnet50_b32.dnn").expect("parses");
    let p = dnnc_compiler::codegen::gpu::compile_gpu(&g, &Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    let limits = dnnc_runtime::gpu::GpuLimits::default();
    for st in p.stages() {
        assert!(
            st.workgroups
                .iter()
                .all(|&w| w <= limits.max_groups_per_dim),
            "{}: {:?}",
            st.label,
            st.workgroups
        );
    }
    let arena = p.arena_words as u64 * 4;
    eprintln!(
        "resnet50 batch 32: {} kernels, {} shaders, arena {} MiB, weights {} MiB",
        p.kernels.len(),
        p.stages().count(),
        arena >> 20,
        (p.weights.len() * 4) >> 20
    );
    let Some(dev) = gpu_or_skip("resnet50_batch32_compiles_for_the_gpu") else {
        return;
    };
    if arena > dev.limits().max_binding_bytes {
        let e = dnnc_runtime::gpu::GpuExecutable::new(dev, p).unwrap_err();
        assert!(matches!(e, dnnc_runtime::gpu::GpuError::Limit(_)), "{e}");
        assert!(e.to_string().contains("activation arena"), "{e}");
    }
}
