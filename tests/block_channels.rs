//! The `block-channels` layout pass on a real network: MobileNet-V2's
//! inverted residual chains become one channel-blocked region, and the
//! rewritten graph computes what the plain one does on the reference
//! interpreter (the oracle: onnxruntime's `output.npy`).

use dnnc_integration::{allclose, shared_or_skip};
use dnnc_ir::op::DataLayout;
use dnnc_ir::tensor::read_npy;
use dnnc_ir::Op;

#[test]
#[ignore = "runs MobileNet-V2 on the interpreter; use cargo test --release -- --include-ignored"]
fn mobilenet_v2_blocked_matches_onnxruntime() {
    let Some(shared) = shared_or_skip("mobilenet_v2_blocked_matches_onnxruntime") else {
        return;
    };
    let dir = shared.join("models/mobilenet_v2");
    if !dir.join("model.onnx").exists() {
        eprintln!(
            "SKIPPED mobilenet_v2_blocked_matches_onnxruntime: no {}",
            dir.display()
        );
        return;
    }
    let mut g = dnnc_compiler::load_model(&dir.join("model.onnx")).expect("imports");
    dnnc_passes::Pipeline::baseline()
        .run(&mut g)
        .expect("baseline passes");
    let convs = |g: &dnnc_ir::Graph, d: DataLayout| {
        g.topo_order()
            .into_iter()
            .filter(|&n| matches!(&g.node(n).op, Op::Conv2d(p) if p.data == d))
            .count()
    };
    let all = convs(&g, DataLayout::Nchw);
    dnnc_passes::block_channels::block_channels(&mut g).expect("pass runs");
    dnnc_ir::verify(&g).expect("verifies");
    let blocked = convs(&g, DataLayout::Nchw8c);
    // Every conv but the 3-channel stem: 17 blocks' pointwise and
    // depthwise convs and the final 1x1.
    assert_eq!(blocked, all - 1, "blocked convs");
    let transposes = g
        .topo_order()
        .into_iter()
        .filter(|&n| matches!(g.node(n).op, Op::Transpose { .. }))
        .count();
    assert_eq!(transposes, 2, "one reorder in, one out");
    let input = read_npy(&dir.join("input.npy")).expect("input.npy");
    let want = read_npy(&dir.join("output.npy")).expect("output.npy");
    let in_name = g.value(g.inputs()[0]).name.clone();
    let outs = dnnc_runtime::run(&g, &[(in_name, input)]).expect("runs");
    let (got, want) = (outs[0].as_f32().expect("f32"), want.as_f32().expect("f32"));
    let (ok, max_abs, _) = allclose(
        got.as_slice().expect("contiguous"),
        want.as_slice().expect("contiguous"),
        1e-3,
        1e-4,
    );
    assert!(ok, "max abs error {max_abs:e}");
}

/// The cpu backend with channel-blocked chains on MobileNet-V2 matches
/// onnxruntime's `output.npy`, at one and two threads.
#[test]
#[ignore = "compiles and runs MobileNet-V2; use cargo test --release -- --include-ignored"]
fn mobilenet_v2_cpu_blocked_matches_onnxruntime() {
    let Some(shared) = shared_or_skip("mobilenet_v2_cpu_blocked_matches_onnxruntime") else {
        return;
    };
    let dir = shared.join("models/mobilenet_v2");
    if !dir.join("model.onnx").exists() {
        eprintln!(
            "SKIPPED mobilenet_v2_cpu_blocked_matches_onnxruntime: no {}",
            dir.display()
        );
        return;
    }
    let mut g = dnnc_compiler::load_model(&dir.join("model.onnx")).expect("imports");
    dnnc_passes::Pipeline::baseline()
        .run(&mut g)
        .expect("baseline passes");
    let opts = dnnc_compiler::codegen::cpu::CpuOptions {
        nchw_only: false,
        ..Default::default()
    };
    let mut exe = dnnc_compiler::codegen::cpu::compile_cpu(&g, &opts).expect("compiles");
    let blocked = exe
        .steps()
        .iter()
        .filter(|s| s.algo.is_some() && s.name.ends_with(".nchw8c"))
        .count();
    assert!(blocked >= 1, "the final 1x1 conv runs blocked");
    let input = read_npy(&dir.join("input.npy")).expect("input.npy");
    let want = read_npy(&dir.join("output.npy")).expect("output.npy");
    let in_name = g.value(g.inputs()[0]).name.clone();
    for threads in [1, 2] {
        exe.set_threads(threads).expect("threads");
        let outs = exe.run(&[(in_name.clone(), input.clone())]).expect("runs");
        let (got, want) = (outs[0].as_f32().expect("f32"), want.as_f32().expect("f32"));
        let (ok, max_abs, _) = allclose(
            got.as_slice().expect("contiguous"),
            want.as_slice().expect("contiguous"),
            1e-3,
            1e-4,
        );
        assert!(ok, "{threads} threads: max abs error {max_abs:e}");
    }
}
