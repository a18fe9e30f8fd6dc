//! A max pool computed inside the im2col conv kernel that feeds it, a
//! band of pool rows at a time (`conv_pool`): stride-2 and stride-1
//! convs (columns written, and gathered from phase rows), pools with and
//! without padding, ceil mode, overlapping (3x3/2, 3x3/1) and disjoint
//! (2x2/2) windows, Relu, Clip and bias-only epilogues, a batch, and NaNs.
//! Each against the interpreter, bitwise against the same graph with the
//! conv and the pool as two kernels, and bitwise across 2, 3 and 7 tasks
//! with every kernel forced to split (tasks take over the conv rows their
//! previous band shares, or compute them when the band is their first).

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::{Concurrency, KernelSplit};

/// One conv + epilogue + max pool graph: input shape, conv attributes,
/// epilogue line (`%e = ...(%c)`, or empty for bias only), pool
/// attributes, conv output channels.
struct Case {
    x: [usize; 4],
    m: usize,
    k: usize,
    conv: &'static str,
    ep: &'static str,
    pool: &'static str,
}

const CASES: [Case; 7] = [
    // SqueezeNet's stem: 3x3/2 conv, Relu, 3x3/2 ceil-mode pool (the last
    // window clipped); k = 27 over 64 rows (5 panels): gathered, strip by
    // strip into the scratch.
    Case {
        x: [1, 3, 160, 150],
        m: 64,
        k: 3,
        conv: "strides=[2,2]",
        ep: "Relu",
        pool: "kernel=[3,3], strides=[2,2], ceil_mode=1",
    },
    // ResNet's stem at batch 2: 7x7/2 conv padded by 3, 3x3/2 pool padded
    // by 1 (the first band's windows start in the padding).
    Case {
        x: [2, 3, 150, 140],
        m: 64,
        k: 7,
        conv: "strides=[2,2], pads=[3,3,3,3]",
        ep: "Relu",
        pool: "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
    },
    // Three row panels: the GEMM gathers B from the phase rows; bias only.
    Case {
        x: [1, 3, 180, 160],
        m: 40,
        k: 3,
        conv: "strides=[2,2], pads=[1,1,1,1]",
        ep: "",
        pool: "kernel=[3,3], strides=[2,2], pads=[1,1,1,1]",
    },
    // A stride-1 conv (im2col by rows), Clip, disjoint 2x2/2 windows
    // (no rows shared between bands).
    Case {
        x: [1, 4, 100, 90],
        m: 32,
        k: 3,
        conv: "pads=[1,1,1,1]",
        ep: "Clip",
        pool: "kernel=[2,2], strides=[2,2]",
    },
    // A stride-1 pool: bands share two conv rows.
    Case {
        x: [1, 4, 100, 90],
        m: 32,
        k: 3,
        conv: "pads=[1,1,1,1]",
        ep: "Relu",
        pool: "kernel=[3,3], strides=[1,1], pads=[1,1,1,1]",
    },
    // k = 27 over 128 rows (10 panels): the stride-2 columns written.
    Case {
        x: [1, 3, 120, 120],
        m: 128,
        k: 3,
        conv: "strides=[2,2], pads=[1,1,1,1]",
        ep: "Relu",
        pool: "kernel=[3,3], strides=[2,2], ceil_mode=1",
    },
    // Odd sizes everywhere, asymmetric conv padding, a 2x3 pool window.
    Case {
        x: [1, 3, 151, 137],
        m: 56,
        k: 5,
        conv: "strides=[2,2], pads=[2,1,1,2]",
        ep: "Relu",
        pool: "kernel=[2,3], strides=[2,2], pads=[0,1,0,1]",
    },
];

fn graph(c: &Case, seed: usize) -> Graph {
    let [_, ch, _, _] = c.x;
    let (m, k) = (c.m, c.k);
    let ep = match c.ep {
        "" => String::new(),
        "Clip" => "%e = Clip(%c) {min=0.0, max=6.0}".to_string(),
        op => format!("%e = {op}(%c)"),
    };
    let [n, _, h, w] = c.x;
    parse(&format!(
        "  input %x: f32[{n},{ch},{h},{w}]
  param %w: f32[{m},{ch},{k},{k}] = he(seed={seed})
  param %b: f32[{m}] = uniform(low=-0.5, high=0.5, seed={})
  %c = Conv2d(%x, %w, %b) {{{}}}
  {ep}
  %y = MaxPool({}) {{{}}}
  output %y",
        seed + 1,
        c.conv,
        if c.ep.is_empty() { "%c" } else { "%e" },
        c.pool
    ))
}

fn unfused() -> CpuOptions {
    CpuOptions {
        unfused_blocks: true,
        ..Default::default()
    }
}

/// Whether the executable runs the conv and the pool as one kernel.
fn fused(exe: &dnnc_runtime::cpu::Executable) -> bool {
    exe.steps()
        .iter()
        .any(|s| s.op.starts_with("Conv2d") && s.op.ends_with("+MaxPool"))
}

fn input(c: &Case, seed: u64) -> Vec<(String, Tensor)> {
    vec![("x".to_string(), rand_f32(&c.x, seed, -2.0, 2.0))]
}

#[test]
fn pooled_conv_kernels_match_the_interpreter_and_the_unfused_kernels() {
    for (i, c) in CASES.iter().enumerate() {
        let g = graph(c, 10 + i);
        let x = input(c, 100 + i as u64);
        check_with(&g, &x, 1e-4, 1e-5, &CpuOptions::default());
        let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        assert!(fused(&exe), "case {i}: not fused: {:?}", exe.steps());
        let apart = compile_cpu(&g, &unfused()).unwrap();
        assert!(!fused(&apart), "case {i}: fused with unfused_blocks");
        let (a, b) = (exe.run(&x).unwrap(), apart.run(&x).unwrap());
        assert_eq!(bits(&a), bits(&b), "case {i}: fused vs two kernels");
    }
}

#[test]
fn pooled_conv_kernels_split_over_bands_bitwise() {
    for (i, c) in CASES.iter().enumerate() {
        let g = graph(c, 20 + i);
        let x = input(c, 200 + i as u64);
        let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
        let one = exe.run(&x).unwrap();
        exe.set_kernel_split(KernelSplit::Always);
        exe.set_concurrency(Concurrency::Never);
        for t in [2, 3, 7] {
            exe.set_threads(t).unwrap();
            let tasks = exe.step_tasks().to_vec();
            let split = exe
                .steps()
                .iter()
                .zip(&tasks)
                .any(|(s, &n)| s.op.ends_with("+MaxPool") && n == t.min(s.split) && n > 1);
            assert!(split, "case {i}: the pooled conv did not split: {tasks:?}");
            let r = exe.run(&x).unwrap();
            assert_eq!(bits(&one), bits(&r), "case {i} with {t} threads");
        }
    }
}

/// NaNs in the conv's result (from NaN inputs) reach the pool, whose
/// plane code falls back to the exact windows for such planes: the same
/// bits as the two kernels, NaN where the interpreter has NaN.
#[test]
fn nans_propagate_through_the_pooled_conv() {
    let c = &CASES[0];
    let g = graph(c, 30);
    let mut x = rand_f32(&c.x, 300, -2.0, 2.0);
    if let Tensor::F32(a) = &mut x {
        a[[0, 1, 40, 17]] = f32::NAN;
        a[[0, 2, 101, 149]] = f32::NAN;
    }
    let inputs = vec![("x".to_string(), x)];
    check_with(&g, &inputs, 1e-4, 1e-5, &CpuOptions::default());
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    assert!(fused(&exe));
    let apart = compile_cpu(&g, &unfused()).unwrap();
    let got = exe.run(&inputs).unwrap();
    assert_eq!(bits(&got), bits(&apart.run(&inputs).unwrap()));
    let Tensor::F32(y) = &got[0] else {
        panic!("f32 output")
    };
    assert!(y.iter().any(|v| v.is_nan()), "no NaN reached the output");
}

/// A conv result under 1 MiB stays in cache between two kernels: no
/// fusion; nor when the conv's result has a second reader.
#[test]
fn small_or_shared_conv_results_keep_their_pool_apart() {
    let small = Case {
        x: [1, 3, 40, 40],
        m: 16,
        k: 3,
        conv: "strides=[2,2]",
        ep: "Relu",
        pool: "kernel=[3,3], strides=[2,2]",
    };
    let g = graph(&small, 40);
    let exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    assert!(!fused(&exe), "{:?}", exe.steps());
    let shared = parse(
        "  input %x: f32[1,3,160,150]
  param %w: f32[64,3,3,3] = he(seed=41)
  param %b: f32[64] = uniform(low=-0.5, high=0.5, seed=42)
  %c = Conv2d(%x, %w, %b) {strides=[2,2]}
  %e = Relu(%c)
  %y = MaxPool(%e) {kernel=[3,3], strides=[2,2]}
  %z = ReduceMean(%e) {axes=[2,3], keepdims=1}
  output %y
  output %z",
    );
    let exe = compile_cpu(&shared, &CpuOptions::default()).unwrap();
    assert!(!fused(&exe), "{:?}", exe.steps());
    check_with(
        &shared,
        &input(&CASES[0], 400),
        1e-4,
        1e-5,
        &CpuOptions::default(),
    );
}
