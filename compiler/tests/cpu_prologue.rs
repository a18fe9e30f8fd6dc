//! A BatchNormalization (and a Relu or Clip) feeding only a 1x1 conv is
//! applied by the conv's packed GEMM as it packs its input
//! (`pgemm::Prologue`, DenseNet's pre-activation layers): the kernel's
//! ops then start with the prologue's, no kernel writes the normalised
//! tensor, and the outputs match the interpreter, bitwise equal at 1 and
//! 2 threads. Where the pattern does not hold (the normalised tensor is
//! also an output; the conv forced to im2col) the BatchNormalization
//! stays a kernel of its own.

mod cpu_common;

use cpu_common::checked_steps;
use dnnc_compiler::codegen::cpu::{ConvAlgo, CpuOptions};

/// A graph body: `input %x: f32[n,c,h,w]`, BN parameters for `c`
/// channels, `mid` (statements from `%n`, the BN result), a 1x1 conv of
/// `%src` to `m` channels with bias, then `tail` (statements from `%c`,
/// ending in `output` lines).
fn body(
    (n, c, h, w): (usize, usize, usize, usize),
    m: usize,
    (mid, src): (&str, &str),
    tail: &str,
) -> String {
    format!(
        "  input %x: f32[{n},{c},{h},{w}]
  param %s: f32[{c}] = uniform(low=0.5, high=1.5, seed=1)
  param %b: f32[{c}] = uniform(low=-0.5, high=0.5, seed=2)
  param %mu: f32[{c}] = uniform(low=-0.3, high=0.3, seed=3)
  param %var: f32[{c}] = uniform(low=0.5, high=2, seed=4)
  param %w: f32[{m},{c},1,1] = he(seed=5)
  param %cb: f32[{m}] = uniform(low=-1, high=1, seed=6)
  %n = BatchNormalization(%x, %s, %b, %mu, %var)
{mid}
  %c = Conv2d(%{src}, %w, %cb)
{tail}"
    )
}

/// The kernel (step) labels of `body` compiled with `opts`, after checking
/// it against the interpreter on random inputs and 2 threads bitwise
/// against 1.
fn run(body: &str, opts: &CpuOptions) -> Vec<String> {
    checked_steps(body, opts, 7).0
}

#[test]
fn batchnorm_and_activation_before_a_pointwise_conv_are_its_prologue() {
    let relu = ("  %a = Relu(%n)", "a");
    let cases = [
        // Relu; bias and Relu after the conv; 3 row panels of 14 (a B
        // read in place without the prologue), two images.
        (
            (2, 64, 14, 14),
            40,
            relu,
            "  %y = Relu(%c)\n  output %y",
            "BatchNormalization+Relu+Conv2d+Relu",
        ),
        // Clip; k across two packing blocks (300 > 256) with a residual.
        (
            (1, 300, 7, 7),
            90,
            ("  %a = Clip(%n) {min=0, max=6}", "a"),
            "  input %r: f32[1,90,7,7]\n  %y = Add(%c, %r)\n  output %y",
            "BatchNormalization+Clip+Conv2d+Add",
        ),
        // No activation and nothing fused after the conv.
        (
            (1, 24, 20, 20),
            16,
            ("", "n"),
            "  output %c",
            "BatchNormalization+Conv2d",
        ),
        // Columns with a 17-wide tail (81 = 2 x 32 + 17), three images.
        (
            (3, 32, 9, 9),
            70,
            relu,
            "  output %c",
            "BatchNormalization+Relu+Conv2d",
        ),
    ];
    for (dims, m, mid, tail, label) in cases {
        let ops = run(&body(dims, m, mid, tail), &CpuOptions::default());
        assert_eq!(ops, [label], "{label}");
    }
}

#[test]
fn a_batchnorm_read_elsewhere_or_before_another_algorithm_stays_a_kernel() {
    let dims = (1, 64, 14, 14);
    let relu = ("  %a = Relu(%n)", "a");
    // The normalised tensor is also an output.
    let ops = run(
        &body(dims, 40, relu, "  output %c\n  output %a"),
        &CpuOptions::default(),
    );
    assert!(
        ops.iter().any(|o| o == "BatchNormalization+Relu") && ops.iter().any(|o| o == "Conv2d"),
        "{ops:?}"
    );
    // The conv forced to im2col, whose columns generated code writes (the
    // GEMM does not pack them).
    let opts = CpuOptions {
        conv_algo: Some(ConvAlgo::Im2col),
        ..Default::default()
    };
    let ops = run(&body(dims, 40, relu, "  output %c"), &opts);
    assert!(
        ops.iter().any(|o| o == "BatchNormalization+Relu"),
        "{ops:?}"
    );
}
