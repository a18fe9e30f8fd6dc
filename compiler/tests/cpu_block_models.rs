//! Batch-8 models built from the blocks of torchvision architectures that
//! `../shared/models` does not cover (EfficientNet squeeze-excitation with
//! SiLU and 5x5 depthwise, RegNet grouped bottleneck, Inception-v3 1x7/7x1
//! branches with average pooling, DenseNet dense block, ResNet-50
//! bottleneck), checked in under `tests/fixtures/blocks` with
//! onnxruntime's outputs (`generate.py` there rebuilds them). Each must
//! match on the CPU backend within rtol 1e-3, atol 1e-4 with the default
//! algorithm choice (also with pools and Concats channel-blocked) and with
//! every convolution algorithm forced, at 1 and 2 threads.

mod cpu_common;

use clap::ValueEnum;
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use std::path::PathBuf;

fn blocks() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/blocks");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|d| d.unwrap().path())
        .filter(|p| p.join("model.onnx").exists())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn batch8_blocks_match_onnxruntime_with_every_algorithm_and_thread_count() {
    let dirs = blocks();
    assert_eq!(dirs.len(), 5, "expected five block fixtures");
    let mut algos: Vec<Option<ConvAlgo>> = vec![None];
    algos.extend(ConvAlgo::value_variants().iter().copied().map(Some));
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let g = dnnc_compiler::onnx::import_onnx_file(dir.join("model.onnx"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let x = dnnc_ir::tensor::read_npy(&dir.join("input.npy")).unwrap();
        let want = dnnc_ir::tensor::read_npy(&dir.join("output.npy")).unwrap();
        assert_eq!(x.ty().shape[0], 8, "{name}: fixtures are batch 8");
        let ins = vec![(g.value(g.inputs()[0]).name.clone(), x)];
        // The default choice also with pools and Concats kept out of the
        // blocked regions (`plain_pools`: the Inception branch's average
        // pool, the dense block's Concats, the bottleneck's max pool).
        let runs = algos
            .iter()
            .map(|&a| (a, false))
            .chain(std::iter::once((None, true)));
        for (algo, plain_pools) in runs {
            let opts = CpuOptions {
                conv_algo: algo,
                plain_pools,
                ..Default::default()
            };
            let mut exe = compile_cpu(&g, &opts).unwrap_or_else(|e| panic!("{name} {algo:?}: {e}"));
            for threads in [1, 2] {
                exe.set_threads(threads).unwrap();
                let got = exe
                    .run(&ins)
                    .unwrap_or_else(|e| panic!("{name} {algo:?} {threads}T: {e}"));
                let what = format!("{name} {algo:?} plain pools {plain_pools} {threads}T");
                let err = cpu_common::assert_close(&what, &got[0], &want, 1e-3, 1e-4);
                println!("{what:40} max abs err {err:.2e}");
            }
        }
    }
}
