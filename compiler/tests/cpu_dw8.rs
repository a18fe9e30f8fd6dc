//! Depthwise convs with 5x5 windows on small maps (EfficientNet's) on the
//! CPU backend: the default build runs them on the runtime's interleaved
//! kernel (its split units are channel blocks), checked against the
//! interpreter (the oracle) over stride, map size (rows shorter than a
//! vector included), fused bias / Relu6 / SiLU epilogues, a residual and
//! an op the kernel leaves to the generic epilogue; two threads bitwise
//! equal to one. 3x3 windows and larger maps run on the interleaved kernel
//! on AVX-512 machines and on the plane kernel elsewhere.

mod cpu_common;

use cpu_common::{check_one_input_and_threads, parse};
use dnnc_compiler::codegen::cpu::{compile_cpu, conv_plan, ConvAlgo, CpuOptions};

/// A depthwise `k x k` conv of `c` channels at stride `s` on `n` images
/// of `hw x hw`, then `tail` (reading `%c`, writing `%y`).
fn graph(n: usize, c: usize, hw: usize, (k, s): (usize, usize), tail: &str) -> String {
    let p = k / 2;
    format!(
        "  input %x: f32[{n},{c},{hw},{hw}]
  param %w: f32[{c},1,{k},{k}] = he(seed=1)
  param %b: f32[{c}] = uniform(low=-0.2, high=0.2, seed=2)
  %c = Conv2d(%x, %w, %b) {{pads=[{p},{p},{p},{p}], strides=[{s},{s}], group={c}}}
{tail}
  output %y"
    )
}

const RELU6: &str = "  %y = Clip(%c) {min=0.0, max=6.0}";
const SILU: &str = "  %sg = Sigmoid(%c)\n  %y = Mul(%c, %sg)";
const RESIDUAL: &str = "  %r = Add(%c, %x)\n  %y = Relu(%r)";
const GENERIC: &str = "  %y = Tanh(%c)";

/// The split units of the graph's only conv kernel.
fn conv_units(body: &str) -> Vec<String> {
    let g = parse(body);
    let exe = compile_cpu(&g, &CpuOptions::default()).expect("compile");
    exe.steps()
        .iter()
        .find(|s| !s.split_units.is_empty())
        .map(|s| s.split_units.clone())
        .unwrap_or_default()
}

fn run(body: &str, seed: u64) {
    let g = parse(body);
    let opts = CpuOptions::default();
    let plan = conv_plan(&g, &opts);
    assert!(
        plan.iter().all(|c| c.algo == ConvAlgo::Depthwise),
        "the heuristic gives depthwise convs depthwise: {plan:?}"
    );
    check_one_input_and_threads(&g, seed, &opts);
}

#[test]
fn large_window_depthwise_convs_on_small_maps_match_the_interpreter() {
    let cases = [
        graph(2, 16, 14, (5, 1), SILU),
        graph(2, 24, 7, (5, 1), RELU6),
        graph(1, 16, 14, (5, 2), SILU),
        graph(1, 8, 28, (5, 1), SILU),
        graph(2, 16, 9, (5, 1), RESIDUAL),
        graph(1, 16, 11, (5, 2), GENERIC),
    ];
    for (i, body) in cases.iter().enumerate() {
        run(body, i as u64 + 1);
    }
    // The interleaved kernel ran: its units are channel blocks.
    assert_eq!(conv_units(&cases[0]), ["channel blocks"]);
}

/// 3x3 windows and large maps run on the interleaved kernel where the
/// core's 256-bit FMAs are full width (AVX-512 machines), else on the
/// plane kernel; right either way (and under the other kernel, forced
/// through a 5x5 window of the same map on a non-AVX-512 machine, the
/// first test covers it).
#[test]
fn small_windows_and_large_maps_take_the_machines_kernel() {
    let wide = dnnc_runtime::cpu::pgemm::Kernel::best() == dnnc_runtime::cpu::pgemm::Kernel::Avx512;
    for (i, body) in [
        graph(2, 16, 14, (3, 1), SILU),
        graph(1, 8, 40, (3, 2), RELU6),
        graph(1, 16, 33, (3, 1), SILU),
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            conv_units(body) == ["channel blocks"],
            wide,
            "interleaved kernel on an AVX-512 machine only:\n{body}"
        );
        run(body, 9 + i as u64);
    }
    // A residual runs after the conv (which then does not split).
    run(&graph(1, 16, 33, (3, 1), RESIDUAL), 12);
}
