//! Concatenations built in place: the parts' producers write straight into
//! their slices of the result, so the Concat costs no kernel. Outputs match
//! the interpreter, at 1 and 2 threads (branches writing disjoint slices of
//! one buffer may run concurrently), and the cases that cannot be built in
//! place (a batch axis before the concat axis, a part that is a graph
//! output or an input, a misaligned offset, a part used twice) keep their
//! Concat kernel and still match.

mod cpu_common;

use cpu_common::{bits, check, parse, rand_f32};
use dnnc_compiler::codegen::cpu::{compile_cpu, CpuOptions};
use dnnc_ir::{Graph, Tensor};
use dnnc_runtime::cpu::Concurrency;

fn x(shape: &[usize], seed: u64) -> Vec<(String, Tensor)> {
    vec![("x".to_string(), rand_f32(shape, seed, -2.0, 2.0))]
}

/// Concat steps of `g`'s executable.
fn concat_steps(g: &Graph) -> usize {
    let exe = compile_cpu(g, &CpuOptions::default()).unwrap();
    exe.steps()
        .iter()
        .filter(|s| s.op.contains("Concat"))
        .count()
}

/// An inception-like block: four branches concatenated, then consumed.
const BLOCK: &str = "  input %x: f32[1,8,12,12]
  param %w1: f32[16,8,1,1] = he(seed=1)
  param %w2: f32[16,8,3,3] = he(seed=2)
  param %w3: f32[8,8,5,5] = he(seed=3)
  param %w4: f32[8,8,1,1] = he(seed=4)
  %a = Conv2d(%x, %w1)
  %ra = Relu(%a)
  %b = Conv2d(%x, %w2) {pads=[1,1,1,1]}
  %rb = Relu(%b)
  %c = Conv2d(%x, %w3) {pads=[2,2,2,2]}
  %p = MaxPool(%x) {kernel=[3,3], strides=[1,1], pads=[1,1,1,1]}
  %d = Conv2d(%p, %w4)
  %y = Concat(%ra, %rb, %c, %d) {axis=1}
  %z = Relu(%y)
  %s = GlobalAveragePool(%y)
  output %z
  output %s";

#[test]
fn branches_write_their_slices_and_the_concat_disappears() {
    let g = parse(BLOCK);
    check(&g, &x(&[1, 8, 12, 12], 1));
    assert_eq!(concat_steps(&g), 0);
    let inputs = x(&[1, 8, 12, 12], 2);
    let mut exe = compile_cpu(&g, &CpuOptions::default()).unwrap();
    let one = exe.run(&inputs).unwrap();
    exe.set_threads(2).unwrap();
    exe.set_concurrency(Concurrency::Always);
    assert!(
        exe.waves()
            .iter()
            .any(|w| w.concurrent && w.steps.len() >= 3),
        "branches writing disjoint slices should share a wave: {:?}",
        exe.waves()
    );
    for _ in 0..3 {
        assert_eq!(bits(&one), bits(&exe.run(&inputs).unwrap()));
    }
}

#[test]
fn a_concat_of_concats_builds_the_inner_one_in_place_only() {
    let g = parse(
        "  input %x: f32[1,4,8,8]
  param %w1: f32[4,4,1,1] = he(seed=1)
  param %w2: f32[4,4,1,1] = he(seed=2)
  param %w3: f32[8,4,1,1] = he(seed=3)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%x, %w2)
  %c = Conv2d(%x, %w3)
  %ab = Concat(%a, %b) {axis=1}
  %y = Concat(%ab, %c) {axis=1}
  output %y",
    );
    check(&g, &x(&[1, 4, 8, 8], 3));
    assert_eq!(concat_steps(&g), 1);
}

#[test]
fn concats_that_cannot_be_built_in_place_keep_their_kernel() {
    // Batch 2 before the concat axis: the parts interleave.
    let g = parse(
        "  input %x: f32[2,4,8,8]
  param %w1: f32[4,4,1,1] = he(seed=1)
  param %w2: f32[4,4,1,1] = he(seed=2)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%x, %w2)
  %y = Concat(%a, %b) {axis=1}
  output %y",
    );
    check(&g, &x(&[2, 4, 8, 8], 4));
    assert_eq!(concat_steps(&g), 1);
    // A part that is also a graph output, and a graph input as a part.
    let g = parse(
        "  input %x: f32[1,4,8,8]
  param %w1: f32[4,4,1,1] = he(seed=1)
  %a = Conv2d(%x, %w1)
  %y = Concat(%a, %x) {axis=1}
  output %y
  output %a",
    );
    check(&g, &x(&[1, 4, 8, 8], 5));
    assert_eq!(concat_steps(&g), 1);
    // A 3-channel 5x5 part: the second part's offset (300 bytes) breaks
    // the 64-byte alignment.
    let g = parse(
        "  input %x: f32[1,4,5,5]
  param %w1: f32[3,4,1,1] = he(seed=1)
  param %w2: f32[4,4,1,1] = he(seed=2)
  %a = Conv2d(%x, %w1)
  %b = Conv2d(%x, %w2)
  %y = Concat(%a, %b) {axis=1}
  output %y",
    );
    check(&g, &x(&[1, 4, 5, 5], 6));
    assert_eq!(concat_steps(&g), 1);
    // The same value twice.
    let g = parse(
        "  input %x: f32[1,4,8,8]
  param %w1: f32[4,4,1,1] = he(seed=1)
  %a = Conv2d(%x, %w1)
  %y = Concat(%a, %a) {axis=1}
  output %y",
    );
    check(&g, &x(&[1, 4, 8, 8], 7));
    assert_eq!(concat_steps(&g), 1);
}
