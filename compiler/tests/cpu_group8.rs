//! Grouped convs of 8-channel groups (RegNet's 3x3 convs) on the CPU
//! backend: the default build gives them `direct`, which runs the
//! runtime's grouped-8 kernel, checked against the interpreter (the
//! oracle) over stride, padding, kernel size, maps narrower than a
//! vector, fused bias / Relu / residual / SiLU epilogues and an op the
//! kernel leaves to the generic epilogue; two threads bitwise equal to
//! one.

mod cpu_common;

use cpu_common::{check_one_input_and_threads, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{conv_plan, ConvAlgo, CpuOptions};

/// A grouped `k x k` conv of `c` channels in groups of 8 at stride `s`
/// on `n` images of `hw x hw`, then `tail` (reading `%c`, writing `%y`).
fn graph(n: usize, c: usize, hw: usize, (k, s): (usize, usize), tail: &str) -> String {
    let p = k / 2;
    format!(
        "  input %x: f32[{n},{c},{hw},{hw}]
  param %w: f32[{c},8,{k},{k}] = he(seed=1)
  param %b: f32[{c}] = uniform(low=-0.2, high=0.2, seed=2)
  %c = Conv2d(%x, %w, %b) {{pads=[{p},{p},{p},{p}], strides=[{s},{s}], group={g}}}
{tail}
  output %y",
        g = c / 8
    )
}

const RELU: &str = "  %y = Relu(%c)";
const SILU: &str = "  %sg = Sigmoid(%c)\n  %y = Mul(%c, %sg)";
const RESIDUAL: &str = "  %r = Add(%c, %x)\n  %y = Relu(%r)";
const GENERIC: &str = "  %y = Tanh(%c)";

fn run(body: &str, seed: u64) {
    let g = parse(body);
    let opts = CpuOptions::default();
    let plan = conv_plan(&g, &opts);
    assert!(
        plan.iter().all(|c| c.algo == ConvAlgo::Direct),
        "the heuristic gives grouped-8 convs direct: {plan:?}"
    );
    check_one_input_and_threads(&g, seed, &opts);
}

#[test]
fn grouped8_convs_match_the_interpreter() {
    run(&graph(2, 16, 14, (3, 1), RELU), 1);
    run(&graph(1, 24, 7, (3, 1), SILU), 2);
    run(&graph(2, 16, 9, (3, 1), RESIDUAL), 3);
    run(&graph(1, 16, 11, (5, 1), GENERIC), 4);
    run(&graph(1, 32, 17, (3, 1), RELU), 5);
}

#[test]
fn strided_grouped8_convs_on_wide_maps_match_the_interpreter() {
    // 64 -> 32 columns: the heuristic's strided threshold.
    run(&graph(1, 16, 64, (3, 2), RELU), 6);
    run(&graph(2, 24, 65, (3, 2), SILU), 7);
}

#[test]
fn strided_grouped8_convs_on_narrow_maps_keep_im2col() {
    let g = parse(&graph(1, 16, 28, (3, 2), RELU));
    let plan = conv_plan(&g, &CpuOptions::default());
    assert_eq!(plan[0].algo, ConvAlgo::Im2col, "{plan:?}");
    // Forced, direct still runs the grouped-8 kernel, and right.
    let opts = CpuOptions {
        conv_algo: Some(ConvAlgo::Direct),
        ..Default::default()
    };
    let x = g.inputs()[0];
    let ins = vec![(
        g.value(x).name.clone(),
        rand_f32(&g.value(x).ty.shape, 8, -1.0, 1.0),
    )];
    check_with(&g, &ins, 1e-4, 1e-5, &opts);
}
