//! Winograd F(4x4) kernels whose input transform and output transform
//! run on the native AVX-512 kernels (`runtime::cpu::wino`, tile rows of
//! at least 7 and 12 tiles; the output one with a bias, a residual and
//! at most one Relu or Clip): SqueezeNet's and
//! ResNet-18's map sizes (55x55 in bands, 56x56), a map whose last tile
//! row and column are partial, no bias, Clip, a batch of two with padded
//! planes (its images sharing their GEMMs), 28x28 and 27x30 maps (the
//! input transform alone native), against the interpreter and
//! bitwise across 2 and 3 threads with every kernel split; residual
//! epilogues (ResNet's second conv of a block) with Relu, Clip and
//! nothing after the Add, the residual on either side of it.

mod cpu_common;

use cpu_common::{bits, check_with, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, ConvAlgo, CpuOptions};
use dnnc_ir::Graph;
use dnnc_runtime::cpu::{Concurrency, KernelSplit};

/// A 3x3 conv padded by 1 from `c` to `m` channels on `n x c x h x w`,
/// with bias (or not) and the epilogue line `ep` (`%y = ...(%c)`, or
/// empty: the conv is the output).
fn conv(n: usize, c: usize, m: usize, (h, w): (usize, usize), bias: bool, ep: &str) -> Graph {
    let (b, bp) = if bias {
        (
            format!("  param %b: f32[{m}] = uniform(low=-0.5, high=0.5, seed=5)\n"),
            ", %b",
        )
    } else {
        (String::new(), "")
    };
    let (ep, out) = if ep.is_empty() {
        (String::new(), "%c")
    } else {
        (format!("  {ep}\n"), "%y")
    };
    parse(&format!(
        "  input %x: f32[{n},{c},{h},{w}]
  param %w: f32[{m},{c},3,3] = he(seed=4)
{b}  %c = Conv2d(%x, %w{bp}) {{pads=[1,1,1,1]}}
{ep}  output {out}"
    ))
}

fn check(g: &Graph, shape: [usize; 4], seed: u64) {
    let opts = CpuOptions {
        conv_algo: Some(ConvAlgo::Winograd4),
        ..Default::default()
    };
    let x = vec![("x".to_string(), rand_f32(&shape, seed, -2.0, 2.0))];
    check_with(g, &x, 1e-3, 1e-4, &opts);
    let mut exe = compile_cpu(g, &opts).unwrap();
    let one = exe.run(&x).unwrap();
    exe.set_kernel_split(KernelSplit::Always);
    exe.set_concurrency(Concurrency::Never);
    for t in [2, 3] {
        exe.set_threads(t).unwrap();
        assert_eq!(bits(&exe.run(&x).unwrap()), bits(&one), "{t} threads");
    }
}

#[test]
fn native_output_transforms_match_the_interpreter() {
    let relu = "%y = Relu(%c)";
    let clip = "%y = Clip(%c) {min=-0.5, max=0.75}";
    // SqueezeNet's fire3 (in bands of one tile row), ResNet-18's layer1.
    check(&conv(1, 16, 64, (55, 55), true, relu), [1, 16, 55, 55], 1);
    check(&conv(1, 16, 24, (56, 56), true, relu), [1, 16, 56, 56], 2);
    // Partial last tile row and column, no bias; Clip; no epilogue.
    check(&conv(1, 8, 20, (50, 61), false, relu), [1, 8, 50, 61], 3);
    check(&conv(1, 8, 20, (49, 49), true, clip), [1, 8, 49, 49], 4);
    check(&conv(1, 8, 20, (57, 48), true, ""), [1, 8, 57, 48], 5);
    // Two images; 70 tiles a row (five vectors of tiles).
    check(&conv(2, 8, 16, (53, 53), true, relu), [2, 8, 53, 53], 6);
    // 7 and 8 tiles a row: the native input transform, the generated
    // output one.
    check(&conv(1, 16, 16, (28, 28), true, relu), [1, 16, 28, 28], 10);
    check(&conv(1, 8, 12, (27, 30), true, clip), [1, 8, 27, 30], 11);
    check(&conv(1, 4, 8, (30, 280), true, relu), [1, 4, 30, 280], 7);
}

#[test]
fn residual_epilogues_on_the_native_output_transform() {
    for (i, (add, ep)) in [
        ("%s = Add(%c, %r)", "%y = Relu(%s)"),
        ("%s = Add(%r, %c)", "%y = Clip(%s) {min=-0.25, max=1.0}"),
        ("%y = Add(%c, %r)", ""),
    ]
    .into_iter()
    .enumerate()
    {
        let out = if ep.is_empty() { "" } else { ep };
        let g = parse(&format!(
            "  input %x: f32[2,8,56,53]
  input %r: f32[2,16,56,53]
  param %w: f32[16,8,3,3] = he(seed=4)
  param %b: f32[16] = uniform(low=-0.5, high=0.5, seed=5)
  %c = Conv2d(%x, %w, %b) {{pads=[1,1,1,1]}}
  {add}
  {out}
  output %y"
        ));
        let opts = CpuOptions {
            conv_algo: Some(ConvAlgo::Winograd4),
            ..Default::default()
        };
        let ins = vec![
            (
                "x".to_string(),
                rand_f32(&[2, 8, 56, 53], 8 + i as u64, -2.0, 2.0),
            ),
            (
                "r".to_string(),
                rand_f32(&[2, 16, 56, 53], 9 + i as u64, -2.0, 2.0),
            ),
        ];
        check_with(&g, &ins, 1e-3, 1e-4, &opts);
        let mut exe = compile_cpu(&g, &opts).unwrap();
        let one = exe.run(&ins).unwrap();
        exe.set_kernel_split(KernelSplit::Always);
        exe.set_concurrency(Concurrency::Never);
        exe.set_threads(3).unwrap();
        assert_eq!(
            bits(&exe.run(&ins).unwrap()),
            bits(&one),
            "case {i}, 3 threads"
        );
    }
}
