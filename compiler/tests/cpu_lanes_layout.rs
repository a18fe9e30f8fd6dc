//! Convs and a fully-connected layer whose packed weight takes the lanes
//! layout (`pgemm::Layout::Lanes`: output channels as vector lanes, tiles
//! transposed into NCHW as they are stored): a pointwise conv on a 7x7 map
//! with bias, residual and Relu (batch 2), a stride-2 conv whose B is
//! gathered from its input rows, a Winograd F(4x4) conv with 49 tiles,
//! a batch-1 Gemm (a matrix-vector product), a batch-8 Gemm with Relu
//! (its batch rows read by their column stride, its output stored as the
//! accumulators hold it) and a batch-3 MatMul with an untransposed weight.
//! Each against the interpreter, and at 2 threads bitwise equal to 1. The
//! layout rule is checked on each shape first, and the fully-connected
//! layers' packed weights have the lanes layout's size, so the test cannot
//! silently run the panels layout instead. With AVX2 as the best kernel,
//! the fully-connected layers of 2 to 8 batch rows run its lanes kernel.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_runtime::cpu::pgemm::{Kernel, Layout};

/// (graph body, inputs, algorithm, the packed GEMM's (m, n, k, segment)).
type Case = (
    String,
    Vec<(String, dnnc_ir::Tensor)>,
    Option<ConvAlgo>,
    (usize, usize, usize, usize),
);

fn cases() -> Vec<Case> {
    vec![
        (
            "  input %x: f32[2,300,7,7]\n  input %r: f32[2,90,7,7]\n\
             param %w: f32[90,300,1,1] = he(seed=1)\n\
             param %b: f32[90] = uniform(low=-1, high=1, seed=2)\n\
             %c = Conv2d(%x, %w, %b)\n  %a = Add(%c, %r)\n  %y = Relu(%a)\n  output %y\n"
                .into(),
            vec![
                ("x".into(), rand_f32(&[2, 300, 7, 7], 11, -1.0, 1.0)),
                ("r".into(), rand_f32(&[2, 90, 7, 7], 12, -1.0, 1.0)),
            ],
            None,
            (90, 49, 300, 49),
        ),
        (
            "  input %x: f32[1,20,14,14]\n\
             param %w: f32[64,20,3,3] = he(seed=3)\n\
             param %b: f32[64] = uniform(low=-1, high=1, seed=4)\n\
             %c = Conv2d(%x, %w, %b) {strides=[2,2], pads=[1,1,1,1]}\n\
             %y = Relu(%c)\n  output %y\n"
                .into(),
            vec![("x".into(), rand_f32(&[1, 20, 14, 14], 13, -2.0, 2.0))],
            Some(ConvAlgo::Im2col),
            (64, 49, 180, 7),
        ),
        (
            "  input %x: f32[1,64,28,28]\n\
             param %w: f32[128,64,3,3] = he(seed=5)\n\
             %y = Conv2d(%x, %w) {pads=[1,1,1,1]}\n  output %y\n"
                .into(),
            vec![("x".into(), rand_f32(&[1, 64, 28, 28], 14, -1.0, 1.0))],
            Some(ConvAlgo::Winograd4),
            (128, 49, 64, 49),
        ),
        (
            "  input %x: f32[1,256]\n\
             param %w: f32[1000,256] = he(seed=6)\n\
             param %b: f32[1000] = uniform(low=-1, high=1, seed=7)\n\
             %y = Gemm(%x, %w, %b) {transB=1}\n  output %y\n"
                .into(),
            vec![("x".into(), rand_f32(&[1, 256], 15, -1.0, 1.0))],
            None,
            (1000, 1, 256, 1),
        ),
        (
            "  input %x: f32[8,512]\n\
             param %w: f32[1000,512] = he(seed=8)\n\
             param %b: f32[1000] = uniform(low=-1, high=1, seed=9)\n\
             %g = Gemm(%x, %w, %b) {transB=1}\n  %y = Relu(%g)\n  output %y\n"
                .into(),
            vec![("x".into(), rand_f32(&[8, 512], 16, -1.0, 1.0))],
            None,
            (1000, 8, 512, 8),
        ),
        (
            "  input %x: f32[3,256]\n\
             param %w: f32[256,100] = he(seed=10)\n\
             %y = MatMul(%x, %w)\n  output %y\n"
                .into(),
            vec![("x".into(), rand_f32(&[3, 256], 17, -1.0, 1.0))],
            None,
            (100, 3, 256, 3),
        ),
    ]
}

/// Bytes of an executable's packed weights.
fn weight_bytes(e: &dnnc_runtime::cpu::Executable) -> usize {
    use dnnc_runtime::cpu::BufferKind;
    e.buffers()
        .iter()
        .filter_map(|b| match &b.kind {
            BufferKind::Weight(w) => Some(w.len()),
            _ => None,
        })
        .sum()
}

#[test]
fn lanes_layout_convs_and_fc_match_the_interpreter() {
    if Kernel::best() != Kernel::Avx512 {
        eprintln!("skipped: the AVX-512 lanes layout needs AVX-512F, which this machine lacks");
        return;
    }
    for (i, case) in cases().into_iter().enumerate() {
        check_lanes_case(i, case);
    }
}

/// The AVX2 kernel's lanes layout (24-row weight panels, 24 x 4 tiles)
/// on the fully-connected layers of 2 to 8 batch rows it takes: the
/// batch-8 Gemm with Relu and the batch-3 MatMul above, and a batch-5
/// Gemm with SiLU-fused bias, each against the interpreter, at 2 threads
/// bitwise equal to 1, their packed weights of the lanes layout's size.
#[test]
fn avx2_lanes_layout_fc_layers_match_the_interpreter() {
    if Kernel::best() != Kernel::Avx2 {
        eprintln!(
            "skipped: the AVX2 lanes kernel is the layout's kernel only where AVX2 is the best one"
        );
        return;
    }
    let mut fc: Vec<Case> = cases()
        .into_iter()
        .filter(|c| c.0.contains("Gemm") || c.0.contains("MatMul"))
        .filter(|c| (2..=8).contains(&c.3 .1))
        .collect();
    fc.push((
        "  input %x: f32[5,300]\n\
         param %w: f32[70,300] = he(seed=18)\n\
         param %b: f32[70] = uniform(low=-1, high=1, seed=19)\n\
         %g = Gemm(%x, %w, %b) {transB=1}\n  %s = Sigmoid(%g)\n  %y = Mul(%g, %s)\n  output %y\n"
            .into(),
        vec![("x".into(), rand_f32(&[5, 300], 20, -1.0, 1.0))],
        None,
        (70, 5, 300, 5),
    ));
    assert_eq!(fc.len(), 3);
    for (i, case) in fc.into_iter().enumerate() {
        check_lanes_case(i, case);
    }
}

/// One case: the rule picks lanes for its GEMM, the CPU backend matches
/// the interpreter, a Gemm/MatMul's weight is packed in lanes, and 2
/// threads give 1's bits.
fn check_lanes_case(i: usize, (body, ins, algo, (m, n, k, seg)): Case) {
    assert_eq!(
        Layout::choose_segments(m, n, k, seg),
        Layout::Lanes,
        "case {i}: the rule no longer picks lanes for {m}x{n}x{k}"
    );
    let g = parse(&body);
    let opts = CpuOptions {
        conv_algo: algo,
        ..Default::default()
    };
    // F(4x4)'s documented bound (docs/cpu-backend.md, "Accuracy"), else the
    // default one.
    let (rtol, atol) = if algo == Some(ConvAlgo::Winograd4) {
        (2e-4, 2e-4)
    } else {
        (1e-4, 1e-5)
    };
    check_with(&g, &ins, rtol, atol, &opts);
    let mut exe = compile_cpu(&g, &opts).expect("compile");
    if body.contains("Gemm") || body.contains("MatMul") {
        // The weight alone, packed in lanes (rows padded to the kernel's
        // lanes), plus the Gemm's bias, unpacked.
        let bias = if body.contains("%b") { 4 * m } else { 0 };
        assert_eq!(
            weight_bytes(&exe),
            dnnc_runtime::cpu::pgemm::packed_bytes_for(Layout::Lanes, m, k) + bias,
            "case {i}: the weight is not packed in lanes"
        );
    }
    let one = bits(&exe.run(&ins).expect("run"));
    exe.set_threads(2).expect("threads");
    let two = bits(&exe.run(&ins).expect("run"));
    assert_eq!(one, two, "case {i}: 2 threads differ from 1");
}

/// A conv's `layout=` attribute decides its packed filter's layout, over
/// the backend's own rule: the same 1x1 conv (40 output channels on a
/// 14x14 map, where the rule takes panels) recorded as `lanes` and as
/// `panels` packs to the sizes of those layouts (40 rows padded to 64
/// against 42), and both match the interpreter bit for bit with each
/// other at any thread count. Without AVX-512, `lanes` falls back to
/// panels.
#[test]
fn the_ir_layout_attribute_decides_the_packed_filter() {
    use dnnc_runtime::cpu::pgemm::packed_bytes_for;
    let (m, k, hw) = (40, 96, 14);
    let g = |layout: &str| {
        parse(&format!(
            "  input %x: f32[1,{k},{hw},{hw}]
  param %w: f32[{m},{k},1,1] = he(seed=3)
  %c = Conv2d(%x, %w) {{algo=pointwise{layout}}}
  %y = Relu(%c)
  output %y"
        ))
    };
    let ins = vec![("x".to_string(), rand_f32(&[1, k, hw, hw], 4, -1.0, 1.0))];
    assert_eq!(Layout::choose(m, hw * hw, k), Layout::Panels);
    let mut outs = Vec::new();
    for (attr, want) in [
        ("", Layout::Panels),
        (", layout=panels", Layout::Panels),
        (", layout=lanes", Layout::Lanes),
    ] {
        let g = g(attr);
        check_with(&g, &ins, 1e-4, 1e-5, &CpuOptions::default());
        let mut exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
        let want = if Kernel::best() == Kernel::Avx512 {
            want
        } else {
            Layout::Panels
        };
        assert_eq!(weight_bytes(&exe), packed_bytes_for(want, m, k), "{attr}");
        let one = bits(&exe.run(&ins).unwrap());
        exe.set_threads(2).unwrap();
        assert_eq!(one, bits(&exe.run(&ins).unwrap()), "{attr} at 2 threads");
        outs.push(one);
    }
    // Both layouts sum each output over k in the same order.
    assert!(outs.windows(2).all(|w| w[0] == w[1]));
}
