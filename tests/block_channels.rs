//! The `block-channels` layout on a real network: MobileNet-V2's inverted
//! residual chains become one channel-blocked region, and the rewritten
//! graph computes what the plain one does, on the reference interpreter
//! and on the cpu backend (the oracle: onnxruntime's `output.npy`).

use dnnc_integration::{allclose, shared_or_skip};
use dnnc_ir::op::DataLayout;
use dnnc_ir::tensor::read_npy;
use dnnc_ir::{Graph, Op, Tensor};

/// MobileNet-V2 after the baseline passes, its input and onnxruntime's
/// output; `None` after printing why `test` is skipped.
fn mobilenet_v2(test: &str) -> Option<(Graph, Tensor, Tensor)> {
    let dir = shared_or_skip(test)?.join("models/mobilenet_v2");
    if !dir.join("model.onnx").exists() {
        eprintln!("SKIPPED {test}: no {}", dir.display());
        return None;
    }
    let mut g = dnnc_compiler::load_model(&dir.join("model.onnx")).expect("imports");
    dnnc_passes::Pipeline::baseline()
        .run(&mut g)
        .expect("baseline passes");
    let input = read_npy(&dir.join("input.npy")).expect("input.npy");
    let want = read_npy(&dir.join("output.npy")).expect("output.npy");
    Some((g, input, want))
}

/// Asserts `got` matches onnxruntime's `want` within the zoo's bounds.
fn assert_matches(got: &Tensor, want: &Tensor, what: &str) {
    let (got, want) = (got.as_f32().expect("f32"), want.as_f32().expect("f32"));
    let (ok, max_abs, _) = allclose(
        got.as_slice().expect("contiguous"),
        want.as_slice().expect("contiguous"),
        1e-3,
        1e-4,
    );
    assert!(ok, "{what}: max abs error {max_abs:e}");
}

#[test]
#[ignore = "runs MobileNet-V2 on the interpreter; use cargo test --release -- --include-ignored"]
fn mobilenet_v2_blocked_matches_onnxruntime() {
    let Some((mut g, input, want)) = mobilenet_v2("mobilenet_v2_blocked_matches_onnxruntime")
    else {
        return;
    };
    let convs = |g: &Graph, d: DataLayout| {
        g.topo_order()
            .into_iter()
            .filter(|&n| matches!(&g.node(n).op, Op::Conv2d(p) if p.data == d))
            .count()
    };
    let all = convs(&g, DataLayout::Nchw);
    dnnc_passes::block_channels::block_channels(&mut g).expect("pass runs");
    dnnc_ir::verify(&g).expect("verifies");
    // Every conv but the 3-channel stem: 17 blocks' pointwise and
    // depthwise convs and the final 1x1. The stem reads the plain input
    // and writes the blocked layout itself, so no reorder goes in.
    assert_eq!(convs(&g, DataLayout::Nchw8c), all - 1, "blocked convs");
    assert_eq!(convs(&g, DataLayout::NchwToNchw8c), 1, "the stem enters");
    let transposes = g
        .topo_order()
        .into_iter()
        .filter(|&n| matches!(g.node(n).op, Op::Transpose { .. }))
        .count();
    assert_eq!(transposes, 1, "one reorder, out of the region");
    let in_name = g.value(g.inputs()[0]).name.clone();
    let outs = dnnc_runtime::run(&g, &[(in_name, input)]).expect("runs");
    assert_matches(&outs[0], &want, "interpreter");
}

/// The cpu backend, whose default runs the chains blocked (the large
/// expansions inside their depthwise convs), at one and two threads.
#[test]
#[ignore = "compiles and runs MobileNet-V2; use cargo test --release -- --include-ignored"]
fn mobilenet_v2_cpu_blocked_matches_onnxruntime() {
    let Some((g, input, want)) = mobilenet_v2("mobilenet_v2_cpu_blocked_matches_onnxruntime")
    else {
        return;
    };
    let opts = dnnc_compiler::codegen::cpu::CpuOptions::default();
    let mut exe = dnnc_compiler::codegen::cpu::compile_cpu(&g, &opts).expect("compiles");
    // The whole chain, the final 1x1 conv included, runs blocked: its
    // global pool is a mean over the blocked planes, and the one reorder
    // left moves the 1280 means out (a plain final conv would leave the
    // mean plain and reorder its 1280 x 7 x 7 input instead).
    let ops = |op: &str| exe.steps().iter().filter(|s| s.op == op).count();
    assert_eq!(ops("Transpose"), 1, "one reorder, of the pooled means");
    assert!(
        exe.steps()
            .iter()
            .any(|s| s.op == "ReduceMean" && s.name.ends_with(".nchw8c")),
        "the pool is a mean over the blocked planes"
    );
    // Blocks 2-4 (112x112 and 56x56 maps, 1.8-4.8 MB expanded) each run
    // as one kernel: expansion, depthwise conv, projection.
    let fused = exe
        .steps()
        .iter()
        .filter(|s| s.op.starts_with("Conv2d+Clip+Conv2d+Clip+Conv2d"))
        .count();
    assert_eq!(fused, 3, "fused blocks");
    let in_name = g.value(g.inputs()[0]).name.clone();
    for threads in [1, 2] {
        exe.set_threads(threads).expect("threads");
        let outs = exe.run(&[(in_name.clone(), input.clone())]).expect("runs");
        assert_matches(&outs[0], &want, &format!("cpu, {threads} threads"));
    }
}
